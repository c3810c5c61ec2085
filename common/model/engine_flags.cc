#include "common/model/engine_flags.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/format/serving_plan.h"

namespace moe {

void EngineFlags::Register(FlagSet& flags, const std::string& model_help) {
  flags.AddString("model", &model, model_help);
  flags.AddString("attention", &attention, kAttentionFlagHelp);
  flags.AddString("kv-dtype", &kv_dtype, "KV cache storage: f32 or bf16");
  flags.AddString("index-keys", &index_keys,
                  "DSA index keys in the KV cache: auto (int8 where kv_b is integer: converted containers), exact "
                  "(the KV dtype, HF's numbers) or q8 (int8 + one scale per key)");
  flags.AddBytes("ram-budget", &ram_budget,
                 "RAM for resident weights + KV of the context + in-process expert cache (bytes, K/M/G; 0: no "
                 "budget, the plan must still fit MemAvailable)");
  flags.AddBytes("expert-budget", &expert_budget,
                 "in-process expert cache budget (bytes, K/M/G; not with --ram-budget or --expertd)");
  flags.AddString("expertd", &expertd,
                  "routed experts from the expertd at this unix socket (unix:PATH or PATH; shared cache; --model "
                  "must be the container expertd serves); empty: the in-process expert cache");
  flags.AddString("plan", &plan,
                  "a serving plan of --model (moe plan --out FILE): KV dtype, context, expert cache and MTP from it "
                  "(not with --ram-budget / --expert-budget)");
  flags_ = &flags;
}

absl::StatusOr<FittedPlan> EngineFlags::ResolvePlan(int64_t kv_tokens, EngineConfig cfg) const {
  if (ram_budget > 0 || expert_budget > 0)
    return absl::InvalidArgumentError("give --plan or --ram-budget / --expert-budget, not both");
  MOE_ASSIGN_OR_RETURN(ServingPlan p, LoadServingPlan(plan));
  MOE_RETURN_IF_ERROR(Annotate(CheckPlanMatchesModel(p, model), absl::StrCat("--plan ", plan)));
  if (p.expertd != !expertd.empty())
    return absl::InvalidArgumentError(absl::StrCat(
        "--plan ", plan, p.expertd ? " keeps routed experts in expertd: give --expertd"
                                   : " keeps routed experts in this process: it has no room for --expertd"));
  if (flags_ != nullptr && flags_->WasSet("kv-dtype") && kv_dtype != p.kv_dtype)
    return absl::InvalidArgumentError(
        absl::StrCat("--kv-dtype ", kv_dtype, " differs from the serving plan's ", p.kv_dtype, " (", plan, ")"));
  if (kv_tokens > p.context)
    return absl::OutOfRangeError(absl::StrCat("the request needs ", kv_tokens,
                                              " tokens of context; the serving plan ", plan, " gives each worker ",
                                              p.context, " (moe plan --context N plans more)"));
  const IndexKeys planned = p.index_keys == "q8" ? IndexKeys::kQ8 : IndexKeys::kExact;
  if (flags_ != nullptr && flags_->WasSet("index-keys") && cfg.index_keys != IndexKeys::kAuto &&
      cfg.index_keys != planned)
    return absl::InvalidArgumentError(absl::StrCat("--index-keys ", index_keys, " differs from the serving plan's ",
                                                   p.index_keys, " (", plan, ")"));
  cfg.kv_dtype = p.kv_dtype == "bf16" ? KvDtype::kBF16 : KvDtype::kF32;
  cfg.index_keys = planned;
  cfg.load_mtp = p.load_mtp;
  if (!p.expertd) cfg.expert_budget_bytes = p.expert_cache_bytes;
  FittedPlan out;
  MOE_ASSIGN_OR_RETURN(out.plan, Engine::Plan(model, cfg));
  out.context = p.context;
  out.kv_budget_bytes = p.context * p.kv_bytes_per_token;
  out.prefill_pass_bytes = p.prefill_pass_bytes;
  out.kv_bytes = out.kv_budget_bytes;
  out.plan.expert_cache_bytes = p.expertd ? 0 : p.expert_cache_bytes;
  // The plan fitted the whole budget; what this process adds to memory now
  // (its copies, its KV, its own expert cache) must be available. The shared
  // mapped weights are one copy for every process, counted by the plan.
  const int64_t need = p.private_bytes + out.kv_budget_bytes + (p.expertd ? 0 : p.expert_cache_min_bytes);
  const int64_t avail = MemAvailableBytes();
  if (avail > 0 && need > avail)
    return absl::ResourceExhaustedError(absl::StrCat(
        "--plan ", plan, ": this process needs ", need, " B now (weights copied at load ", p.private_bytes,
        " B + KV ", out.kv_budget_bytes, " B", p.expertd ? "" : " + the minimum expert cache", ") but only ", avail,
        " B are available (MemAvailable); refusing to load"));
  out.report = absl::StrCat("serving plan ", plan, ": context ", p.context, " tokens (", p.kv_dtype, " KV, ",
                            out.kv_budget_bytes, " B), expert cache ", p.expert_cache_bytes, " B",
                            p.expertd ? " in expertd" : "", "; ", out.plan.ToString());
  out.config = std::move(cfg);
  return out;
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
  {
    absl::StatusOr<IndexKeys> ik = ParseIndexKeys(index_keys);
    if (!ik.ok()) return Annotate(ik.status(), "--index-keys");
    cfg.index_keys = *ik;
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
  if (!plan.empty()) return ResolvePlan(kv_tokens, std::move(cfg));
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
