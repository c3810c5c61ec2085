// Everything text-related the engine needs from a model directory, in one load:
// the tokenizer, the chat format and the ids that end generation.
//
//   MOE_ASSIGN_OR_RETURN(auto mt, text::LoadModelText(dir, /*chat_format=*/""));
//   auto prompt = text::RenderChatPrompt(mt.format, request);    // --chat
//   auto ids = mt.tokenizer->Encode(prompt->text, {.add_special_tokens = false,
//                                                  .plain_spans = prompt->client_spans});
//   // --prompt TEXT: mt.tokenizer->Encode(text) (post-processor adds BOS where the file says)
//
// Files: DIR/tokenizer.json (or tokenizer.json.gz), DIR/chat_template.jinja or
// DIR/tokenizer_config.json. chat_format (a flag value) overrides detection; an empty one
// and no recognisable template is an error naming the directory.
// Stop ids: GLM: <|endoftext|>, <|user|>, <|observation|> (MODEL_SPEC.md section 7);
// DeepSeek-V3: <｜end▁of▁sentence｜>; plus tokenizer_config.json's eos_token when present.
// Thread safety: the result is immutable; share it freely.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/text/chat.h"
#include "common/text/tokenizer.h"

namespace moe::text {

struct ModelText {
  std::unique_ptr<Tokenizer> tokenizer;
  ChatFormat format = ChatFormat::kGlm;
  std::vector<int32_t> stop_ids;  // sorted, unique
};

absl::StatusOr<ModelText> LoadModelText(const std::string& model_dir, const std::string& chat_format);

}  // namespace moe::text
