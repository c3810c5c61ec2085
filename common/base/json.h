// JSON from outside the process (request bodies, model files, arguments strings), parsed
// with a bound on nesting depth, and JSON written to clients without throwing.
//
// Why a depth bound: nlohmann's parser is iterative, but copying, dumping and comparing a
// value recurse once per level, so a 40 KB body nested 10,000 deep overflows a thread's
// stack in whatever code touches it next. ParseJson refuses such text before building
// anything (JsonNestingDepth is a linear scan), so every later walk is bounded.
// Why DumpJson: nlohmann's default dump() throws type_error.316 on invalid UTF-8, and a
// client's bytes reach error messages (paths, model names); DumpJson writes U+FFFD instead.
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace moe {

// The default bound: generous for JSON Schemas and tool arguments people write, far below
// what a thread's stack holds.
inline constexpr int kDefaultMaxJsonDepth = 64;

// Deepest nesting of arrays and objects in `text` (0 for a scalar or no JSON), counting
// brackets outside strings; stops scanning once the depth exceeds `stop_above` and returns
// stop_above + 1. Malformed text is scanned all the same (the parser judges it).
int JsonNestingDepth(std::string_view text, int stop_above);

// Parses `text` when it nests at most `max_depth` levels. Errors (InvalidArgument):
// "nests deeper than N levels" or "not valid JSON (syntax error at byte K)".
absl::StatusOr<nlohmann::json> ParseJson(std::string_view text, int max_depth = kDefaultMaxJsonDepth);
absl::StatusOr<nlohmann::ordered_json> ParseOrderedJson(std::string_view text,
                                                        int max_depth = kDefaultMaxJsonDepth);

// Compact JSON text; invalid UTF-8 in strings becomes U+FFFD (never throws on it).
std::string DumpJson(const nlohmann::json& j);
std::string DumpJson(const nlohmann::ordered_json& j);

}  // namespace moe
