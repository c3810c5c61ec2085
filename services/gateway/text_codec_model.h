// TextCodec over the project's text layer (common/text/model_text.h): the model's
// tokenizer.json, its own chat template (chat_template.jinja, tokenizer_config.json's, or
// --chat-template FILE) and the output parser of its family (GLM, DeepSeek-V3/V3.1, Qwen3;
// plain content otherwise).
//
// Chat requests become the template's messages as OpenAI-compatible servers pass them to
// transformers.apply_chat_template: content as a string ("" for null), name,
// reasoning_content, tool_calls with their arguments as JSON objects (or as the client's
// string when the template concatenates strings -- the DeepSeek-V3 family, probed at load),
// tool_call_id; `developer` stays `developer` when the template's text mentions that role,
// else it is sent as `system` (OpenAI: developer messages are system messages).
// tools are passed unless tool_choice is "none"; chat_template_kwargs are template variables,
// refused by name when the template never reads one or when it is one the server sets
// (messages, tools, add_generation_prompt, the special tokens). A request with tools for a
// template that does not read `tools` is refused too.
// Prompts are encoded with the client's bytes as plain spans (no control token there, prompt.h);
// completions prompts like HF's tokenizer(prompt). Stop ids: ModelText's.
// Thread safety: immutable after Load(); parsers are per choice.
#pragma once

#include <memory>
#include <string>

#include "common/text/model_text.h"
#include "services/gateway/text_codec.h"

namespace moe::gateway {

class ModelTextCodec final : public TextCodec {
 public:
  // `dir` holds tokenizer.json and the chat template; `chat_template_file` (may be empty)
  // overrides the template, `chat_template_name` picks one of a named list.
  static absl::StatusOr<std::unique_ptr<ModelTextCodec>> Load(const std::string& dir,
                                                              const std::string& chat_template_file = "",
                                                              const std::string& chat_template_name = "");

  int32_t vocab_size() const override { return static_cast<int32_t>(mt_.tokenizer->vocab_size()); }
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special_tokens = true) const override;
  absl::StatusOr<ChatPromptIds> EncodeChat(const ChatRequest& request) const override;
  std::string TokenBytesWithSpecial(int32_t id) const override;
  const std::vector<std::string>& TokenTexts() const override { return texts_; }
  std::vector<std::string> OutputMarkers() const override;
  std::optional<structured::ToolSyntax> ToolCallSyntax() const override;
  std::vector<int32_t> StopTokenIds() const override { return mt_.stop_ids; }
  std::unique_ptr<OutputParser> NewChatParser(const ChatRequest& request, bool opens_reasoning) const override;

  // The template's inputs for a request, and the rendered prompt (exposed for tests).
  absl::StatusOr<text::ChatInputs> Inputs(const ChatRequest& request) const;
  absl::StatusOr<std::string> Render(const ChatRequest& request) const;
  const text::ModelText& model_text() const { return mt_; }

 private:
  explicit ModelTextCodec(text::ModelText mt) : mt_(std::move(mt)) {}
  text::ModelText mt_;
  std::vector<std::string> texts_;  // output text per id (output_vocab.h)
  bool developer_role_ = false;  // the template knows "developer"
};

}  // namespace moe::gateway
