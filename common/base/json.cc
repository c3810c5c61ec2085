#include "common/base/json.h"

#include "absl/strings/str_cat.h"

namespace moe {

int JsonNestingDepth(std::string_view text, int stop_above) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) {
        deepest = depth;
        if (deepest > stop_above) return stop_above + 1;
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

namespace {

template <class Json>
absl::StatusOr<Json> Parse(std::string_view text, int max_depth) {
  if (JsonNestingDepth(text, max_depth) > max_depth) {
    return absl::InvalidArgumentError(absl::StrCat("nests deeper than ", max_depth, " levels"));
  }
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat("not valid JSON (syntax error at byte ", e.byte, ")"));
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("not valid JSON (", e.id, ")"));
  }
}

}  // namespace

absl::StatusOr<nlohmann::json> ParseJson(std::string_view text, int max_depth) {
  return Parse<nlohmann::json>(text, max_depth);
}

absl::StatusOr<nlohmann::ordered_json> ParseOrderedJson(std::string_view text, int max_depth) {
  return Parse<nlohmann::ordered_json>(text, max_depth);
}

std::string DumpJson(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

std::string DumpJson(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace moe
