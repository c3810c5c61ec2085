// Fitting a model into RAM before loading it: the one check behind `moe run`,
// `moe score`, `moe mtp` and inferd.
//
// Problem: projecting RAM and policing RSS afterwards ends in OOM kills
// (docs/ARCHITECTURE.md, invariant 4). The plan comes from the stored formats (Engine::Plan), so the
// check is exact for what is loaded up front; the expert cache then grows on
// demand up to the budget that is left.
//
// Thread safety: pure function over its arguments (reads /proc/meminfo).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/model/engine.h"

namespace moe {

struct FittedPlan {
  EngineConfig config;  // base, with expert_budget_bytes set from ram_budget
  MemoryPlan plan;
  int64_t kv_bytes = 0;  // kv_tokens of KV
  std::string report;    // one line: the plan and the KV
  // Set from a serving plan (--plan): the context per sequence it allows and
  // the KV bytes every sequence of a worker shares (0: no such limit).
  int64_t context = 0;
  int64_t kv_budget_bytes = 0;
  // The plan's activation bytes for one prefill pass per worker (0: no plan,
  // or a plan older than planned prefill).
  int64_t prefill_pass_bytes = 0;
};

// ram_budget: bytes for resident weights + KV for `kv_tokens` (< 0: the
// model's max_position_embeddings) + expert cache
// (0 = unlimited: the expert budget of `base` stays). Refuses
// (ResourceExhausted, naming each part) a plan that does not fit the budget,
// or whose up-front need - resident weights, the KV and one MoE layer's
// top-k experts - exceeds the machine's available memory.
absl::StatusOr<FittedPlan> FitMemoryPlan(const std::string& model_dir, uint64_t ram_budget, int64_t kv_tokens,
                                         EngineConfig base);

// MemAvailable of /proc/meminfo in bytes; -1 if unknown.
int64_t MemAvailableBytes();

}  // namespace moe
