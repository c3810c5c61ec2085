#include "tools/moe/model_flags.h"

#include <sys/resource.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/text/chat.h"

namespace moe::cli {

void AddPromptFlags(FlagSet& flags, const char* ids_flag, PromptFlags* p) {
  flags.AddString(ids_flag, &p->ids, "prompt token ids, comma-separated");
  flags.AddString("prompt", &p->text, "prompt text, encoded with the model's tokenizer.json");
  flags.AddString("chat", &p->chat,
                  "chat as OpenAI messages JSON (or {\"messages\":[...],\"tools\":[...]}), rendered with the "
                  "model's chat template");
  flags.AddString("tokenizer", &p->tokenizer, "directory with tokenizer.json + chat template (default: --model)");
  flags.AddString("chat-format", &p->chat_format, "glm or deepseek_v3 (default: detected from the template)");
  flags.AddBool("thinking", &p->thinking, "GLM chat: thinking on (<think>) or off (--no-thinking: </think>)");
}

absl::StatusOr<Prompt> ResolvePrompt(const PromptFlags& p, const char* ids_flag, const std::string& model_dir,
                                     bool allow_empty) {
  const int given = !p.ids.empty() + !p.text.empty() + !p.chat.empty();
  if (given > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("give only one of --", ids_flag, ", --prompt and --chat"));
  }
  Prompt out;
  if (given == 0) {
    if (allow_empty) return out;
    return absl::InvalidArgumentError(absl::StrCat("a prompt is required: --", ids_flag, ", --prompt or --chat"));
  }
  if (!p.ids.empty()) {
    MOE_ASSIGN_OR_RETURN(out.ids, ParseIdList(ids_flag, p.ids));
    return out;
  }
  const std::string dir = p.tokenizer.empty() ? model_dir : p.tokenizer;
  MOE_ASSIGN_OR_RETURN(text::ModelText mt, text::LoadModelText(dir, p.chat_format));
  if (!p.text.empty()) {
    out.ids = mt.tokenizer->Encode(p.text, text::EncodeOptions{});
  } else {
    auto req = text::ParseChatRequestJson(p.chat);
    if (!req.ok()) return Annotate(req.status(), "--chat");
    req->add_generation_prompt = true;
    req->enable_thinking = p.thinking;
    MOE_ASSIGN_OR_RETURN(text::ChatPrompt rendered, text::RenderChatPrompt(mt.format, *req));
    text::EncodeOptions opt;
    opt.add_special_tokens = false;          // the template wrote them
    opt.plain_spans = rendered.client_spans;  // message text is never control tokens
    out.ids = mt.tokenizer->Encode(rendered.text, opt);
  }
  if (out.ids.empty()) return absl::InvalidArgumentError("the prompt encodes to no tokens");
  out.text.emplace(std::move(mt));
  return out;
}

absl::StatusOr<std::vector<int32_t>> ParseIdList(const std::string& flag, const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    int32_t v;
    if (!absl::SimpleAtoi(AV(item), &v)) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", item, "' is not a token id"));
    }
    ids.push_back(v);
  }
  if (ids.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is required (comma-separated ids)"));
  return ids;
}

absl::StatusOr<EngineConfig> PlanAndCheck(const EngineFlags& flags, int64_t kv_tokens, EngineConfig base,
                                          const ExpertdConnector& connect) {
  MOE_ASSIGN_OR_RETURN(FittedPlan fit, flags.Resolve(kv_tokens, std::move(base), connect));
  std::fprintf(stderr, "%s\n", fit.report.c_str());
  return std::move(fit.config);
}

int64_t PeakRssBytes() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;
}

std::string DefaultModelDir() {
#ifdef MOE_DEFAULT_MODEL_DIR
  if (std::ifstream(std::string(MOE_DEFAULT_MODEL_DIR) + "/config.json").good()) return MOE_DEFAULT_MODEL_DIR;
#endif
  if (std::ifstream("models/glm-tiny-chat/config.json").good()) return "models/glm-tiny-chat";
  return "";
}

}  // namespace moe::cli
