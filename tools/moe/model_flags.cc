#include "tools/moe/model_flags.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/sampling/sampler.h"

namespace moe::cli {

void AddPromptFlags(FlagSet& flags, const char* ids_flag, PromptFlags* p) {
  flags.AddString(ids_flag, &p->ids, "prompt token ids, comma-separated");
  flags.AddString("prompt", &p->text, "prompt text, encoded with the model's tokenizer.json");
  flags.AddString("chat", &p->chat,
                  "chat as OpenAI messages JSON (or {\"messages\":[...],\"tools\":[...], template kwargs...}), "
                  "rendered with the model's chat template");
  flags.AddString("tokenizer", &p->tokenizer, "directory with tokenizer.json + chat template (default: --model)");
  flags.AddString("chat-template", &p->chat_template, "chat: a Jinja template file instead of the model's own");
  flags.AddBool("thinking", &p->thinking,
                "chat: set the template's enable_thinking (--no-thinking: false); default: the template's own");
  p->flags = &flags;
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
  const bool thinking_given = p.flags && p.flags->WasSet("thinking");
  if (p.chat.empty() && (!p.chat_template.empty() || thinking_given)) {
    return absl::InvalidArgumentError("--chat-template and --thinking/--no-thinking apply to --chat only");
  }
  text::ModelTextOptions topt;
  topt.chat_template_file = p.chat_template;
  topt.require_chat = !p.chat.empty();
  MOE_ASSIGN_OR_RETURN(text::ModelText mt, text::LoadModelText(dir, topt));
  if (!p.text.empty()) {
    out.ids = mt.tokenizer->Encode(p.text, text::EncodeOptions{});
  } else {
    auto in = text::ParseChatInputsJson(p.chat, /*default_generation_prompt=*/true);
    if (!in.ok()) return Annotate(in.status(), "--chat");
    if (thinking_given) {
      if (!mt.chat->Reads("enable_thinking")) {
        return absl::InvalidArgumentError(absl::StrCat("--thinking/--no-thinking: the chat template (", mt.chat->origin(),
                                                       ") does not read enable_thinking"));
      }
      in->kwargs["enable_thinking"] = p.thinking;
    }
    auto chat = mt.EncodeChat(*in);
    if (!chat.ok()) return Annotate(chat.status(), "--chat");
    out.ids = std::move(chat->ids);
  }
  if (out.ids.empty()) return absl::InvalidArgumentError("the prompt encodes to no tokens");
  out.text.emplace(std::move(mt));
  return out;
}

void SamplingFlags::Register(FlagSet& flags) {
  flags.AddBool("greedy", &greedy, "greedy decoding (default unless --temperature > 0)");
  flags.AddDouble("temperature", &temperature, "sampling temperature (0 = greedy)");
  flags.AddDouble("top-p", &top_p, "nucleus sampling mass");
  flags.AddInt("top-k", &top_k, "sample among the k most likely (0 = off)");
  flags.AddDouble("min-p", &min_p, "drop tokens below this share of the most likely one's probability (0 = off)");
  flags.AddDouble("presence-penalty", &presence_penalty, "subtracted from the logit of every token generated so far");
  flags.AddDouble("frequency-penalty", &frequency_penalty, "subtracted per occurrence of a token generated so far");
  flags.AddInt("seed", &seed, "sampling seed (the API's `seed`: same seed and parameters, same tokens)");
}

absl::StatusOr<SamplingParams> SamplingFlags::Resolve() const {
  SamplingParams sp;
  sp.sample.temperature = greedy ? 0.0f : static_cast<float>(temperature);
  sp.sample.top_p = static_cast<float>(top_p);
  sp.sample.top_k = static_cast<int32_t>(std::clamp<int64_t>(top_k, -1, std::numeric_limits<int32_t>::max()));
  sp.sample.min_p = static_cast<float>(min_p);
  sp.sample.presence_penalty = static_cast<float>(presence_penalty);
  sp.sample.frequency_penalty = static_cast<float>(frequency_penalty);
  sp.seed = static_cast<uint64_t>(seed);
  if (auto bad = CheckSampleParams(sp.sample); !bad.ok()) return Annotate(bad, "sampling flags");
  return sp;
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
