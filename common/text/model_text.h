// Everything text-related the engine needs from a model directory, in one load: the
// tokenizer, the model's own chat template, the output family and the
// ids that end generation. The gateway (services/gateway/text_codec_model.h) and the CLI
// (moe run/score/mtp/tokenize --chat) both load through here, so they render and encode
// chats the same way.
//
//   MOE_ASSIGN_OR_RETURN(auto mt, text::LoadModelText(dir, {}));
//   MOE_ASSIGN_OR_RETURN(auto chat, mt.EncodeChat(inputs));   // ids, prompt, opens_reasoning
//
// Files: DIR/tokenizer.json (or .json.gz); the chat template (chat_template.h: an override
// file, DIR/chat_template.jinja, or tokenizer_config.json's); DIR/config.json's model_type
// (family fallback); DIR/generation_config.json's eos_token_id.
// Stop ids: tokenizer_config.json's eos_token, generation_config.json's eos_token_id, and the
// end-of-turn markers of the family that are in the vocabulary (GLM: <|endoftext|>, <|user|>,
// <|observation|>; DeepSeek: <｜end▁of▁sentence｜>; Qwen: <|im_end|>, <|endoftext|>; any:
// <|eot_id|>, <|eom_id|>, <|im_end|>, <|return|>, <|call|> when the template writes them).
// No template: LoadModelText fails unless `require_chat` is false (then `chat` is null and
// EncodeChat is an error naming the directory).
// Thread safety: the result is immutable; share it freely.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/text/chat_parser.h"
#include "common/text/chat_template.h"
#include "common/text/tokenizer.h"

namespace moe::text {

struct ModelTextOptions {
  std::string tokenizer_file;      // default: DIR/tokenizer.json (or .json.gz)
  std::string chat_template_file;  // --chat-template FILE (overrides the directory's)
  std::string chat_template_name;  // a named template of the list form
  bool require_chat = true;
};

struct EncodedChat {
  ChatPrompt prompt;
  std::vector<int32_t> ids;
  bool opens_reasoning = false;  // the prompt ends inside a think block
};

struct ModelText {
  std::string dir;
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<const ChatTemplate> chat;  // null only with require_chat=false
  ChatFamily family = ChatFamily::kPlain;
  std::vector<int32_t> stop_ids;  // sorted, unique

  // Renders with the model's template and encodes it with the client's bytes as plain spans
  // (prompt.h: no added token is matched inside them, so typed markers stay text).
  absl::StatusOr<EncodedChat> EncodeChat(const ChatInputs& in, const jinja::RenderOptions& opt = {}) const;
};

absl::StatusOr<ModelText> LoadModelText(const std::string& model_dir, const ModelTextOptions& opt);

// The chat request file format of the CLI (`moe tokenize --chat`, `moe run --chat`): a JSON
// object with "messages" and optional "tools", "documents", "add_generation_prompt"; every
// other top-level key is a template variable (kwargs, special tokens such as bos_token). A
// bare array is the messages. `default_generation_prompt` applies when the key is absent.
absl::StatusOr<ChatInputs> ParseChatInputsJson(std::string_view json_text, bool default_generation_prompt);
absl::StatusOr<ChatInputs> ChatInputsFromJson(const nlohmann::ordered_json& j, bool default_generation_prompt);

}  // namespace moe::text
