#include "common/model/engine_flags.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"

namespace moe {

void EngineFlags::Register(FlagSet& flags, const std::string& model_help) {
  flags.AddString("model", &model, model_help);
  flags.AddString("attention", &attention, kAttentionFlagHelp);
  flags.AddString("kv-dtype", &kv_dtype, "KV cache storage: f32 or bf16");
  flags.AddBytes("ram-budget", &ram_budget,
                 "RAM for resident weights + KV of the context + in-process expert cache (bytes, K/M/G; 0: no "
                 "budget, the plan must still fit MemAvailable)");
  flags.AddBytes("expert-budget", &expert_budget,
                 "in-process expert cache budget (bytes, K/M/G; not with --ram-budget or --expertd)");
  flags.AddString("expertd", &expertd,
                  "routed experts from the expertd at this unix socket (unix:PATH or PATH; shared cache; --model "
                  "must be the container expertd serves); empty: the in-process expert cache");
}

absl::StatusOr<FittedPlan> EngineFlags::Resolve(int64_t kv_tokens, EngineConfig cfg,
                                                const ExpertdConnector& connect) const {
  if (model.empty()) return absl::InvalidArgumentError("--model is required");
  MOE_ASSIGN_OR_RETURN(cfg.attention, ParseAttentionFlag(attention));
  if (kv_dtype == "f32") {
    cfg.kv_dtype = KvDtype::kF32;
  } else if (kv_dtype == "bf16") {
    cfg.kv_dtype = KvDtype::kBF16;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--kv-dtype must be f32 or bf16, got '", kv_dtype, "'"));
  }
  if (ram_budget > 0 && expert_budget > 0)
    return absl::InvalidArgumentError("give --ram-budget or --expert-budget, not both");
  if (!expertd.empty() && expert_budget > 0)
    return absl::InvalidArgumentError(
        "give --expertd or --expert-budget, not both (expertd's own --budget bounds its cache)");
  if (expert_budget > 0) cfg.expert_budget_bytes = static_cast<int64_t>(expert_budget);
  if (!expertd.empty()) {
    if (!connect) return absl::InvalidArgumentError(absl::StrCat("--expertd ", expertd, ": not available here"));
    const std::string path = expertd.rfind("unix:", 0) == 0 ? expertd.substr(5) : expertd;
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
      return absl::InvalidArgumentError(
          absl::StrCat("--expertd ", expertd, ": no such socket (is expertd running?)"));
    cfg.expert_source = connect(expertd);
  }
  auto fit = FitMemoryPlan(model, ram_budget, kv_tokens, std::move(cfg));
  // The budget's refusals name the flag (the same words in every program).
  if (!fit.ok() && ram_budget > 0 && absl::IsResourceExhausted(fit.status()))
    return absl::ResourceExhaustedError(absl::StrCat("--ram-budget: ", fit.status().message()));
  return fit;
}

absl::StatusOr<AttentionPath> ParseAttentionFlag(const std::string& value) {
  for (AttentionPath p : {AttentionPath::kAuto, AttentionPath::kExplicit, AttentionPath::kAbsorbed}) {
    if (value == AttentionPathName(p)) return p;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--attention must be auto, explicit or absorbed, got '", value, "'"));
}

}  // namespace moe
