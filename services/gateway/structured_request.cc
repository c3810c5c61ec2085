#include "services/gateway/structured_request.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/structured/constraint_spec.h"

namespace moe::gateway {
namespace {

using Kind = structured::ConstraintSpec::Kind;
using ojson = nlohmann::ordered_json;

constexpr const char* kReasoningEnd = "</think>";

class ConstrainedParser final : public OutputParser {
 public:
  ConstrainedParser(bool in_reasoning, std::string end) : in_reasoning_(in_reasoning), end_(std::move(end)) {}
  Delta Push(std::string_view text) override {
    Delta d;
    if (!in_reasoning_) {
      d.content = std::string(text);
      return d;
    }
    buf_.append(text);
    const size_t at = buf_.find(end_);
    if (at != std::string::npos) {
      d.reasoning = buf_.substr(0, at);
      d.content = buf_.substr(at + end_.size());
      buf_.clear();
      in_reasoning_ = false;
      return d;
    }
    // Hold back a tail that may be the start of the end marker.
    size_t hold = 0;
    for (size_t k = std::min(buf_.size(), end_.size() - 1); k > 0; --k) {
      if (buf_.compare(buf_.size() - k, k, end_, 0, k) == 0) {
        hold = k;
        break;
      }
    }
    d.reasoning = buf_.substr(0, buf_.size() - hold);
    buf_.erase(0, buf_.size() - hold);
    return d;
  }
  Delta Finish() override {
    Delta d;
    d.reasoning = std::move(buf_);
    buf_.clear();
    return d;
  }

 private:
  bool in_reasoning_;
  const std::string end_;
  std::string buf_;
};

}  // namespace

std::unique_ptr<OutputParser> NewConstrainedOutputParser(bool start_in_reasoning, std::string reasoning_end) {
  return std::make_unique<ConstrainedParser>(start_in_reasoning && !reasoning_end.empty(), std::move(reasoning_end));
}

std::optional<ApiError> BuildConstraint(const CommonRequest& common, const ChatRequest* chat, bool opens_reasoning,
                                        const TextCodec& codec, const StructuredConfig& config, BuiltConstraint* out) {
  *out = {};
  structured::ConstraintSpec spec;
  spec.max_whitespace = config.max_whitespace;
  spec.limits.max_repeat = config.max_repeat;
  spec.text_excludes = codec.OutputMarkers();
  const StructuredOutput& so = common.structured;
  std::string param = so.param;
  const bool tools = chat && !chat->tools.is_null() && chat->tool_choice != "none";
  const bool forced = tools && (chat->tool_choice_named || chat->tool_choice == "required");
  const bool single = tools && !chat->parallel_tool_calls;
  if (so.kind != Kind::kNone) {
    if (tools) {
      return BadRequest(absl::StrCat("'", so.param, "' cannot be combined with tools the model may call (tool_choice '",
                                     chat->tool_choice,
                                     "'): one grammar holds the whole output; set tool_choice to \"none\" for the "
                                     "format, or drop it for tool calls"),
                        so.param, "invalid_value");
    }
    spec.kind = so.kind;
    spec.source = so.source;
    spec.strict = so.strict;
  } else if (forced || single) {
    param = forced ? "tool_choice" : "parallel_tool_calls";
    auto syntax = codec.ToolCallSyntax();
    if (!syntax) {
      return BadRequest(absl::StrCat("'", param, "' ",
                                     forced ? "requires enforcing tool calls" : "false requires enforcing one tool call",
                                     ", which this model's chat format does not support yet"),
                        param, "unsupported_value");
    }
    spec.kind = Kind::kToolCalls;
    spec.tool_syntax = *syntax;
    spec.tools_required = forced;
    spec.named_tool = chat->tool_choice_named;
    spec.single_call = single || chat->tool_choice_named;
    for (const auto& t : chat->tools) {
      const auto& f = t["function"];
      const std::string name = f["name"].get<std::string>();
      if (chat->tool_choice_named && name != chat->tool_choice) continue;
      structured::ToolFunction fn;
      fn.name = name;
      if (f.contains("parameters") && f["parameters"].is_object()) fn.parameters = f["parameters"];
      if (!fn.parameters.contains("type") && !fn.parameters.contains("$ref") && !fn.parameters.contains("anyOf")) {
        fn.parameters["type"] = "object";  // OpenAI: parameters describe an object
      }
      fn.strict = f.contains("strict") && f["strict"].is_boolean() && f["strict"].get<bool>();
      spec.tools.push_back(std::move(fn));
    }
  } else {
    return std::nullopt;  // free output
  }
  if (common.ignore_eos) {
    return BadRequest(absl::StrCat("'ignore_eos' cannot be combined with '", param,
                                   "': once the constrained output is complete only an end token is legal"),
                      "ignore_eos", "invalid_value");
  }
  if (opens_reasoning) spec.reasoning_end = kReasoningEnd;
  if (absl::Status st = structured::ValidateConstraint(spec); !st.ok()) {
    return BadRequest(absl::StrCat("'", param, "': ", st.message()), param, "invalid_value");
  }
  out->json = structured::ToJson(spec);
  out->verbatim_body = spec.kind != Kind::kToolCalls;
  out->reasoning_end = spec.reasoning_end;
  return std::nullopt;
}

}  // namespace moe::gateway
