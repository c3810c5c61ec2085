// EngineFlags: the engine's flags, declared once for `moe run`, `moe score`,
// `moe mtp` and inferd, and the one place that turns them into an
// EngineConfig and refuses a memory plan that cannot fit - before anything is
// loaded, with the same message in every program.
//
//   --model DIR              HF checkpoint (config.json + safetensors) or `moe convert` container
//   --attention MODE         auto | explicit | absorbed (AttentionPath, model.h)
//   --kv-dtype f32|bf16      KV cache storage (KvDtype, kv_cache.h)
//   --index-keys auto|exact|q8  DSA index keys in the KV (IndexKeys, kv_cache.h)
//   --ram-budget BYTES       resident weights + KV + in-process expert cache (0: no budget;
//                            the up-front need must still fit MemAvailable)
//   --expert-budget BYTES    the in-process expert cache alone (LocalExpertSource)
//   --expertd ADDR           routed experts from a running expertd (needs a container)
//   --plan FILE              a serving plan of --model (moe plan --out FILE, docs/PLAN.md): the KV
//                            dtype, the context, the expert cache and the MTP layer come from it;
//                            not with --ram-budget / --expert-budget
// --ram-budget and --expert-budget exclude each other, as do --expertd and
// --expert-budget (expertd's own --budget bounds its cache).
//
// Thread safety: plain data; Resolve reads the model's headers and /proc/meminfo.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "common/base/flags.h"
#include "common/model/engine.h"
#include "common/model/memory_fit.h"

namespace moe {

// How a program reaches expertd for `--expertd ADDR`: the factory that
// becomes EngineConfig::expert_source. Programs that link the expertd client
// pass expertd::RemoteSourceFactory (services/expertd_client), possibly
// wrapped; the model layer itself cannot reach expertd.
using ExpertdConnector = std::function<EngineConfig::ExpertSourceFactory(const std::string& addr)>;

struct EngineFlags {
  std::string model;
  std::string attention = "auto";
  std::string kv_dtype = "f32";
  std::string index_keys = "auto";
  uint64_t ram_budget = 0;
  uint64_t expert_budget = 0;
  std::string expertd;
  std::string plan;

  // Declares the flags above on `flags`; --model defaults to `model`'s value
  // (set it first), `model_help` says what --model means to this program.
  void Register(FlagSet& flags, const std::string& model_help);

  // The config these flags ask for, on top of `base` (its other fields stay),
  // with the memory plan for `kv_tokens` tokens of KV (< 0: the model's
  // max_position_embeddings) checked and the in-process expert cache given
  // what --ram-budget leaves. Errors name the flag: a missing --model, a bad
  // --attention / --kv-dtype, exclusive flags together, an --expertd socket
  // that does not exist, and (ResourceExhausted) a plan that does not fit
  // ("--ram-budget: memory plan does not fit the RAM budget of N B: ..." or
  // "memory plan needs at least N B ... (MemAvailable)").
  // With --plan: a context beyond the plan's is refused (OutOfRange) before
  // anything is loaded; a plan for another model, made with(out) --expertd
  // unlike this program's flags, or with another KV dtype than --kv-dtype
  // asks for, is refused by name.
  absl::StatusOr<FittedPlan> Resolve(int64_t kv_tokens, EngineConfig base, const ExpertdConnector& connect) const;

 private:
  const FlagSet* flags_ = nullptr;  // what Register declared on (WasSet)
  absl::StatusOr<FittedPlan> ResolvePlan(int64_t kv_tokens, EngineConfig cfg) const;
};

// --attention: "auto", "explicit" (HF-exact) or "absorbed".
inline constexpr char kAttentionFlagHelp[] =
    "auto (absorbed if kv_b is integer-quantized, else explicit), explicit (HF-exact) or absorbed "
    "(faster at GLM-5's shapes)";
absl::StatusOr<AttentionPath> ParseAttentionFlag(const std::string& value);

}  // namespace moe
