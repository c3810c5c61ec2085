// TextCodec over the project's text layer (common/text): the model's
// tokenizer.json, its chat template (GLM-5 or DeepSeek-V3, detected from the
// model directory) and, for GLM, the reasoning/tool-call output parser.
//
// Prompts: chat requests are rendered exactly as transformers'
// apply_chat_template (common/text/chat.h contract) and tokenized with
// special tokens parsed in the template's own text only — what the client
// wrote (content, names, tools, arguments) never becomes a control token
// (common/text/prompt.h) — and no post-processor; completions prompts are
// tokenized like HF's tokenizer(prompt) (special tokens parsed, post-processor
// applied). Tool calls in assistant messages carry their arguments as the
// JSON string OpenAI clients send; they are parsed back to JSON for the GLM
// template. Stop ids: the tokenizer's <|endoftext|>, <|user|>,
// <|observation|> (GLM) or <｜end▁of▁sentence｜> (DeepSeek) when present,
// plus generation_config.json's eos_token_id.
// Thread safety: immutable after Load(); parsers are per choice.
#pragma once

#include <memory>
#include <string>

#include "common/text/chat.h"
#include "common/text/tokenizer.h"
#include "services/gateway/text_codec.h"

namespace moe::gateway {

class ModelTextCodec final : public TextCodec {
 public:
  // `dir` holds tokenizer.json and chat_template.jinja or tokenizer_config.json.
  static absl::StatusOr<std::unique_ptr<ModelTextCodec>> Load(const std::string& dir);

  int32_t vocab_size() const override { return static_cast<int32_t>(tok_->vocab_size()); }
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override;
  absl::StatusOr<std::vector<int32_t>> EncodeChat(const ChatRequest& request) const override;
  std::string TokenBytes(int32_t id) const override;
  std::vector<int32_t> StopTokenIds() const override { return stop_ids_; }
  std::unique_ptr<OutputParser> NewChatParser(const ChatRequest& request) const override;

  // The rendered prompt (exposed for tests).
  absl::StatusOr<std::string> Render(const ChatRequest& request) const;
  absl::StatusOr<text::ChatPrompt> RenderPrompt(const ChatRequest& request) const;

 private:
  std::unique_ptr<text::Tokenizer> tok_;
  text::ChatFormat format_ = text::ChatFormat::kGlm;
  std::vector<int32_t> stop_ids_;
};

}  // namespace moe::gateway
