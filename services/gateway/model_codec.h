// TextCodec over common/text: the model's own tokenizer.json, chat format (GLM-5 or
// DeepSeek-V3, from the model directory or a flag) and the GLM output parser.
//
// Contract: EncodeChat(request) == the ids of transformers.apply_chat_template for the same
// messages/tools (moe_text's goldens), with thinking on (the gateway protocol has no
// chat_template_kwargs yet). Encode: special tokens written in the text are recognised, the
// post-processor is not applied. TokenBytes: every token's bytes (added tokens as their text,
// so <think>/<tool_call> reach the parser) except the stop tokens, which render as nothing.
// NewChatParser: GLM -> reasoning/content/tool calls (arguments typed by the request's tool
// schemas, sent as JSON strings); DeepSeek-V3 -> everything is content (no parser yet).
// Known gap: ChatRequest::tools is an nlohmann::json (keys sorted), so tool definitions in the
// prompt list their keys alphabetically, not in the client's order as transformers does;
// switching the protocol to nlohmann::ordered_json would make the prompt exact.
// Thread safety: immutable after Load; all methods are const and thread-safe.
#pragma once

#include <memory>
#include <string>

#include "common/text/model_text.h"
#include "services/gateway/text_codec.h"

namespace moe::gateway {

class ModelCodec final : public TextCodec {
 public:
  // `chat_format`: "" (detect from the directory's files), "glm" or "deepseek_v3".
  static absl::StatusOr<std::unique_ptr<ModelCodec>> Load(const std::string& model_dir,
                                                          const std::string& chat_format);

  int32_t vocab_size() const override { return static_cast<int32_t>(mt_.tokenizer->vocab_size()); }
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override;
  absl::StatusOr<std::vector<int32_t>> EncodeChat(const ChatRequest& request) const override;
  std::string TokenBytes(int32_t id) const override;
  std::vector<int32_t> StopTokenIds() const override { return mt_.stop_ids; }
  std::unique_ptr<OutputParser> NewChatParser(const ChatRequest& request) const override;

  // The prompt text EncodeChat tokenizes (for tests and debugging).
  absl::StatusOr<std::string> RenderChat(const ChatRequest& request) const;

 private:
  explicit ModelCodec(text::ModelText mt) : mt_(std::move(mt)) {}
  text::ModelText mt_;
};

}  // namespace moe::gateway
