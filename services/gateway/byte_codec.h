// A byte-level TextCodec: token id b (0..255) is the byte b, id 256 is the
// end-of-text token. Used with test models (the fake worker in tests, the
// load tool); real models use the project tokenizer through its adapter.
//
// Chat template (plain text, documented so tests can predict prompts):
//   for each message: "<|" role "|>\n" content "\n"
//   tool results:     "<|tool|>\n" content "\n"
//   assistant tool calls: "<tool_call>" name " " arguments "</tool_call>\n"
//   tools (if any) first: "<|tools|>\n" one JSON function per line "\n"
//   then "<|assistant|>\n".
// Output: "<think>...</think>" becomes reasoning_content and
// "<tool_call>NAME ARGS</tool_call>" becomes a tool call when the request
// had tools; everything else is content.
// Thread safety: immutable.
#pragma once

#include "services/gateway/text_codec.h"

namespace moe::gateway {

class ByteCodec final : public TextCodec {
 public:
  static constexpr int32_t kEos = 256;
  int32_t vocab_size() const override { return 257; }
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special_tokens = true) const override;
  // chat_template_kwargs: refused (this template has no variables).
  absl::StatusOr<ChatPromptIds> EncodeChat(const ChatRequest& request) const override;
  std::string TokenBytesWithSpecial(int32_t id) const override { return TokenBytes(id); }
  const std::vector<std::string>& TokenTexts() const override;
  std::vector<std::string> OutputMarkers() const override { return {"<think>", "</think>", "<tool_call>", "</tool_call>"}; }
  // <tool_call>NAME ARGS</tool_call>, ARGS a JSON object.
  std::optional<structured::ToolSyntax> ToolCallSyntax() const override {
    return structured::ToolSyntax{"<tool_call>", " ", "json", "</tool_call>", ""};
  }
  std::vector<int32_t> StopTokenIds() const override { return {kEos}; }
  std::unique_ptr<OutputParser> NewChatParser(const ChatRequest& request, bool opens_reasoning) const override;

  static std::string RenderChat(const ChatRequest& request);
};

}  // namespace moe::gateway
