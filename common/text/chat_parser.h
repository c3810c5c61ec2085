// Splits GLM-5 generated text into reasoning, content and tool calls (the inverse of the
// assistant turn in chat.h), whole or incrementally for streaming.
//
// Grammar of a GLM assistant turn (MODEL_SPEC.md section 7):
//   [<think>] REASONING </think> CONTENT { <tool_call>NAME{<arg_key>K</arg_key><arg_value>V</arg_value>}</tool_call> }
// The prompt usually ends with "<|assistant|><think>", so generation starts inside the
// reasoning (start_in_reasoning=true); with enable_thinking=false it ends with "</think>"
// and generation starts in content.
// Argument values: a string when the tool's JSON schema says "type": "string" (or the value
// is not valid JSON, or nests deeper than kDefaultMaxJsonDepth), otherwise the parsed JSON
// value -- the template writes strings raw and everything else as JSON, so without a schema
// "2" comes back as the number 2.
// Streaming contract: Push never emits text that could still turn out to be part of a tag
// (held back: at most one tag's length); concatenating all deltas (plus Finish) gives the
// same reasoning/content/tool calls as Parse on the whole text, before Parse's final strip.
// An unterminated <tool_call> at Finish is returned as content, verbatim.
// Thread safety: one parser per stream.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/text/chat.h"
#include "nlohmann/json.hpp"

namespace moe::text {

struct OutputDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

class GlmOutputParser {
 public:
  // `tools`: the request's tool definitions (null if none), for argument types.
  explicit GlmOutputParser(bool start_in_reasoning, nlohmann::ordered_json tools = nullptr);
  OutputDelta Push(std::string_view text);
  OutputDelta Finish();

  // Whole-text parse; reasoning and content are stripped (Python str.strip()).
  static ChatMessage Parse(std::string_view text, bool start_in_reasoning,
                           const nlohmann::ordered_json& tools = nullptr);

 private:
  enum class State { kReasoning, kContent, kToolCall };
  void Drain(OutputDelta* d, bool final);
  ToolCall ParseCall(std::string_view body) const;

  State state_;
  bool at_start_ = true;
  std::string buf_;
  nlohmann::ordered_json tools_;
};

}  // namespace moe::text
