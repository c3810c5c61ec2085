// Server-sent events framing for OpenAI streaming responses.
//
// Each event is "data: <one-line JSON>\n\n"; the stream ends with
// "data: [DONE]\n\n". JSON never contains a raw newline (nlohmann::dump
// escapes them), so one event is always one `data:` line. Comments
// (": ...\n\n") are ignored by clients and used as keep-alives.
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"

namespace moe::gateway {

std::string SseData(const nlohmann::json& event);
std::string SseDone();
std::string SseComment(std::string_view text);

// Parses a byte stream of SSE frames (used by tests and the load tool):
// returns the `data:` payloads in order; incomplete trailing frames stay in
// *buffer for the next call.
std::vector<std::string> SseParse(std::string* buffer);

}  // namespace moe::gateway
