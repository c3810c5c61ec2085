// Splits generated text into reasoning, content and tool calls, whole or incrementally for
// streaming -- the inverse of the assistant turn of each supported chat family's template.
//
// Families (DetectChatFamily: from the template's literal text, else config.json's
// model_type):
//   GLM (4.5 .. 5.x):  [<think>] R </think> C { <tool_call>NAME{<arg_key>K</arg_key><arg_value>V</arg_value>}</tool_call> }
//   DeepSeek-V3:       C <｜tool▁calls▁begin｜>{<｜tool▁call▁begin｜>TYPE<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>}<｜tool▁calls▁end｜>
//   DeepSeek-V3.1:     [R </think>] C <｜tool▁calls▁begin｜>{<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>}<｜tool▁calls▁end｜>
//   Qwen3 / Hermes:    [<think> R </think>] C { <tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call> }
//   plain:             [<think> R </think>] C   (a leading think block only; no tool calls)
// A prompt that ends inside a think block (GLM's "<|assistant|><think>", DeepSeek-V3.1's
// thinking mode) starts the parser in reasoning (start_in_reasoning).
// GLM argument values: a string when the tool's JSON schema says "type": "string" (or the
// value is not valid JSON, or nests deeper than kDefaultMaxJsonDepth), else the parsed JSON
// value -- the template writes strings raw and everything else as JSON. Qwen arguments are
// the JSON object the model wrote; DeepSeek's stay the string the model wrote. A call whose
// body does not parse is returned as content, verbatim (as is an unterminated one at Finish).
// Streaming contract: Push never emits text that could still turn out to be part of a tag
// (held back: at most one tag's length); concatenating all deltas (plus Finish) gives the
// same reasoning/content/tool calls as Parse on the whole text, before Parse's final strip.
// Thread safety: one parser per stream.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"

namespace moe::text {

struct ToolCall {
  std::string name;
  // A JSON object, or (DeepSeek) the string the model wrote.
  nlohmann::ordered_json arguments = nlohmann::ordered_json::object();
  std::string type = "function";
};

struct OutputDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

enum class ChatFamily { kPlain, kGlm, kDeepSeekV3, kDeepSeekV31, kQwen };
const char* ChatFamilyName(ChatFamily f);

// From the chat template's literal strings (its markers), falling back to config.json's
// model_type ("" when unknown).
ChatFamily DetectChatFamily(const std::vector<std::string>& template_literals, std::string_view model_type);

// Whether a rendered prompt leaves the model inside a think block (ends with "<think>",
// trailing whitespace aside).
bool PromptOpensReasoning(std::string_view prompt);

class ChatOutputParser {
 public:
  // `tools`: the request's tool definitions (null if none), for GLM's argument types.
  ChatOutputParser(ChatFamily family, bool start_in_reasoning, nlohmann::ordered_json tools = nullptr);
  OutputDelta Push(std::string_view text);
  OutputDelta Finish();

  // Whole-text parse; reasoning and content are stripped (Python str.strip()).
  static OutputDelta Parse(ChatFamily family, std::string_view text, bool start_in_reasoning,
                           const nlohmann::ordered_json& tools = nullptr);

  struct Syntax;

 private:
  enum class State { kReasoning, kContent, kSection, kCall };
  void Drain(OutputDelta* d, bool final);
  bool ParseCall(std::string_view body, ToolCall* out) const;

  ChatFamily family_;
  const Syntax* syntax_;
  State state_;
  State after_call_ = State::kContent;
  bool at_start_ = true;
  std::string buf_;
  size_t call_scanned_ = 0;  // kCall: buf_ before this offset holds no closing tag
  nlohmann::ordered_json tools_;
};

}  // namespace moe::text
