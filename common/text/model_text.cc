#include "common/text/model_text.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/base/json.h"
#include "common/base/status.h"

namespace moe::text {
namespace {

using ojson = nlohmann::ordered_json;

std::string ReadOptional(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::string();
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> FamilyStops(ChatFamily f) {
  switch (f) {
    case ChatFamily::kGlm: return {"<|endoftext|>", "<|user|>", "<|observation|>"};
    case ChatFamily::kDeepSeekV3:
    case ChatFamily::kDeepSeekV31: return {"<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"};
    case ChatFamily::kQwen: return {"<|im_end|>", "<|endoftext|>"};
    default: return {};
  }
}

}  // namespace

absl::StatusOr<ModelText> LoadModelText(const std::string& dir, const ModelTextOptions& opt) {
  namespace fs = std::filesystem;
  ModelText mt;
  mt.dir = dir;
  std::string tok_path = opt.tokenizer_file.empty() ? dir + "/tokenizer.json" : opt.tokenizer_file;
  if (opt.tokenizer_file.empty() && !fs::exists(tok_path) && fs::exists(tok_path + ".gz")) tok_path += ".gz";
  MOE_ASSIGN_OR_RETURN(mt.tokenizer, Tokenizer::FromFile(tok_path));
  auto chat = ChatTemplate::Load(dir, opt.chat_template_file, opt.chat_template_name);
  if (chat.ok()) {
    mt.chat = *std::move(chat);
  } else if (opt.require_chat || !absl::IsNotFound(chat.status())) {
    return chat.status();
  }
  std::string model_type;
  if (const std::string cfg = ReadOptional(dir + "/config.json"); !cfg.empty()) {
    auto j = ParseOrderedJson(cfg);
    if (j.ok() && j->is_object() && j->contains("model_type") && (*j)["model_type"].is_string()) {
      model_type = (*j)["model_type"].get<std::string>();
    }
  }
  std::vector<std::string> literals;
  if (mt.chat) literals = mt.chat->Literals();
  mt.family = DetectChatFamily(literals, model_type);

  // Stop ids.
  std::vector<std::string> stops = FamilyStops(mt.family);
  if (mt.chat) {
    for (const auto& [name, value] : mt.chat->special_tokens()) {
      if (name == "eos_token") stops.push_back(value);
    }
    for (const char* t : {"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|return|>", "<|call|>"}) {
      for (const std::string& l : literals) {
        if (l.find(t) != std::string::npos) {
          stops.push_back(t);
          break;
        }
      }
    }
  }
  for (const std::string& s : stops) {
    const int32_t id = mt.tokenizer->TokenToId(s);
    if (id >= 0) mt.stop_ids.push_back(id);
  }
  if (const std::string gc = ReadOptional(dir + "/generation_config.json"); !gc.empty()) {
    auto j = ParseOrderedJson(gc);
    if (!j.ok()) return Annotate(j.status(), dir + "/generation_config.json");
    if (j->is_object() && j->contains("eos_token_id")) {
      const ojson& e = (*j)["eos_token_id"];
      if (e.is_number_integer()) mt.stop_ids.push_back(e.get<int32_t>());
      if (e.is_array()) {
        for (const auto& x : e) {
          if (x.is_number_integer()) mt.stop_ids.push_back(x.get<int32_t>());
        }
      }
    }
  }
  std::sort(mt.stop_ids.begin(), mt.stop_ids.end());
  mt.stop_ids.erase(std::unique(mt.stop_ids.begin(), mt.stop_ids.end()), mt.stop_ids.end());
  if (mt.stop_ids.empty() && mt.chat) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": no end-of-text token: tokenizer_config.json has no eos_token in "
                                                   "the vocab and generation_config.json no eos_token_id"));
  }
  return mt;
}

absl::StatusOr<EncodedChat> ModelText::EncodeChat(const ChatInputs& in, const jinja::RenderOptions& opt) const {
  if (!chat) {
    return absl::FailedPreconditionError(absl::StrCat(dir, " has no chat template (chat_template.jinja or "
                                                      "tokenizer_config.json's chat_template); give one with --chat-template"));
  }
  EncodedChat out;
  MOE_ASSIGN_OR_RETURN(out.prompt, chat->Render(in, opt));
  EncodeOptions eo;
  eo.add_special_tokens = false;  // the template wrote them
  eo.plain_spans = out.prompt.client_spans;
  out.ids = tokenizer->Encode(out.prompt.text, eo);
  out.opens_reasoning = PromptOpensReasoning(out.prompt.text);
  return out;
}

absl::StatusOr<ChatInputs> ParseChatInputsJson(std::string_view text, bool default_generation_prompt) {
  MOE_ASSIGN_OR_RETURN(ojson j, ParseOrderedJson(text));
  return ChatInputsFromJson(j, default_generation_prompt);
}

absl::StatusOr<ChatInputs> ChatInputsFromJson(const ojson& j, bool default_generation_prompt) {
  ChatInputs in;
  in.add_generation_prompt = default_generation_prompt;
  if (j.is_array()) {
    in.messages = j;
    return in;
  }
  if (!j.is_object() || !j.contains("messages")) {
    return absl::InvalidArgumentError("chat: expected a messages array or an object with 'messages'");
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (k == "messages") {
      if (!it.value().is_array()) return absl::InvalidArgumentError("chat: 'messages' must be an array");
      in.messages = it.value();
    } else if (k == "tools") {
      if (!it.value().is_null() && !it.value().is_array()) return absl::InvalidArgumentError("chat: 'tools' must be an array");
      in.tools = it.value();
    } else if (k == "documents") {
      if (!it.value().is_null() && !it.value().is_array()) {
        return absl::InvalidArgumentError("chat: 'documents' must be an array");
      }
      in.documents = it.value();
    } else if (k == "add_generation_prompt") {
      if (!it.value().is_boolean()) return absl::InvalidArgumentError("chat: 'add_generation_prompt' must be true or false");
      in.add_generation_prompt = it.value().get<bool>();
    } else {
      in.kwargs[k] = it.value();
    }
  }
  return in;
}

}  // namespace moe::text
