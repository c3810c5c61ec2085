// Chat messages and prompt rendering for the model families moestream serves, in C++
// (no Jinja): GLM-5 (MODEL_SPEC.md section 7; tested against
// tests/data/text/glm_tiny/chat_template.jinja rendered by transformers) and DeepSeek-V3
// (its own tokenizer_config.json template, replicated quirks included).
//
// Contract: RenderChat(format, request) == transformers.apply_chat_template(..., tokenize=
// False) for the same messages/tools/kwargs (goldens in tests/data/text/goldens/chat.json).
// The format comes from a flag (ParseChatFormat) or from the model's files
// (DetectChatFormat: chat_template.jinja, else tokenizer_config.json "chat_template").
// An unknown format/template, an unknown role or malformed messages JSON is an error.
// Thread safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/text/prompt.h"
#include "nlohmann/json.hpp"

namespace moe::text {

struct ToolCall {
  std::string name;
  // A JSON object (GLM needs one) or, as OpenAI sends it, a string holding JSON.
  nlohmann::ordered_json arguments = nlohmann::ordered_json::object();
  std::string type = "function";
  std::string id;  // optional, passed through by servers
};

struct ChatMessage {
  std::string role;                    // system, user, assistant, tool (or observation)
  std::optional<std::string> content;  // null allowed; text parts are joined when parsing
  std::optional<std::string> reasoning_content;
  std::vector<ToolCall> tool_calls;
  bool has_tool_calls = false;         // the "tool_calls" key was present
};

struct ChatRequest {
  std::vector<ChatMessage> messages;
  nlohmann::ordered_json tools;        // null or an array of tool definitions (OpenAI form)
  bool add_generation_prompt = true;
  bool enable_thinking = true;         // GLM: <think> vs </think> after <|assistant|>
  bool clear_thinking = true;          // GLM: drop reasoning of turns before the last user turn
};

enum class ChatFormat { kGlm, kDeepSeekV3 };

const char* ChatFormatName(ChatFormat f);
// "glm", "glm5", "glm4" -> kGlm; "deepseek_v3", "deepseek-v3", "deepseek" -> kDeepSeekV3.
absl::StatusOr<ChatFormat> ParseChatFormat(std::string_view name);
// Classifies a Jinja template source by its markers.
absl::StatusOr<ChatFormat> DetectChatFormatFromTemplate(std::string_view jinja, std::string_view origin);
// Looks in `model_dir` for chat_template.jinja, then tokenizer_config.json.
absl::StatusOr<ChatFormat> DetectChatFormat(const std::string& model_dir);

// Parses OpenAI-style JSON: either {"messages": [...], "tools": [...], ...flags} or a bare
// messages array. Content may be a string, null or a list of {"type":"text","text":..}.
absl::StatusOr<ChatRequest> ParseChatRequestJson(std::string_view json_text);
absl::StatusOr<std::vector<ChatMessage>> ParseMessagesJson(const nlohmann::ordered_json& messages);

absl::StatusOr<std::string> RenderChat(ChatFormat format, const ChatRequest& request);
// The same prompt with the byte ranges that came from the request (prompt.h): encode it with
// EncodeOptions::plain_spans = client_spans so client text never becomes control tokens.
absl::StatusOr<ChatPrompt> RenderChatPrompt(ChatFormat format, const ChatRequest& request);

}  // namespace moe::text
