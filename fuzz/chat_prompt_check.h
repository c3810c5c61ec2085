// Shared by the chat-template fuzz targets: the contracts every render keeps, whatever the
// template or the request (common/text/chat_template.h, prompt.h).
#pragma once

#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/text/prompt.h"

namespace moe::fuzz {

// A render ended in a prompt whose client spans lie inside the text, sorted, disjoint and
// merged when adjacent, or in an error whose message starts with the template's origin.
// `again` is the same render repeated: renders are deterministic.
inline void CheckRender(const absl::StatusOr<text::ChatPrompt>& r, const absl::StatusOr<text::ChatPrompt>& again,
                        std::string_view origin) {
  if (!r.ok()) {
    if (std::string(r.status().message()).rfind(origin, 0) != 0) std::abort();
  } else {
    for (size_t i = 0; i < r->client_spans.size(); ++i) {
      const auto& s = r->client_spans[i];
      if (s.end <= s.begin || s.end > r->text.size()) std::abort();
      if (i > 0 && s.begin <= r->client_spans[i - 1].end) std::abort();
    }
  }
  if (r.ok() != again.ok()) std::abort();
  if (r.ok() ? (r->text != again->text || r->client_spans != again->client_spans) : r.status() != again.status()) {
    std::abort();
  }
}

}  // namespace moe::fuzz
