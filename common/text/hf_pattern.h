// tokenizer.json pattern objects — {"String": "..."} (a literal) or
// {"Regex": "..."} — as used by the Replace normalizer and the Split
// pre-tokenizer; one parser for both.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/text/regex.h"

namespace moe::text {

// `what` names the component in errors ("normalizer Replace").
inline absl::StatusOr<std::unique_ptr<Regex>> RegexFromHfPattern(const nlohmann::json& pat, std::string_view what) {
  if (pat.contains("String") && pat["String"].is_string()) return Regex::Literal(pat["String"].get<std::string>());
  if (pat.contains("Regex") && pat["Regex"].is_string()) return Regex::Compile(pat["Regex"].get<std::string>());
  return absl::InvalidArgumentError(absl::StrCat(AV(what), ": pattern needs 'String' or 'Regex'"));
}

}  // namespace moe::text
