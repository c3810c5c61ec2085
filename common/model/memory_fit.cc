#include "common/model/memory_fit.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/base/meminfo.h"
#include "common/base/status.h"

namespace moe {

int64_t MemAvailableBytes() { return MemInfoBytes("MemAvailable"); }

absl::StatusOr<FittedPlan> FitMemoryPlan(const std::string& model_dir, uint64_t ram_budget, int64_t kv_tokens,
                                         EngineConfig base) {
  FittedPlan out;
  MOE_ASSIGN_OR_RETURN(out.plan, Engine::Plan(model_dir, base));
  if (kv_tokens < 0) kv_tokens = out.plan.max_context;
  out.kv_bytes = out.plan.kv_bytes_per_token * kv_tokens;
  const int64_t fixed = out.plan.resident_bytes + out.kv_bytes;
  if (ram_budget > 0) {
    const int64_t room = static_cast<int64_t>(ram_budget) - fixed;
    if (room < 0) {
      return absl::ResourceExhaustedError(absl::StrCat("memory plan does not fit the RAM budget of ", ram_budget,
                                                       " B: resident weights ", out.plan.resident_bytes, " B + KV ",
                                                       out.kv_bytes, " B for ", kv_tokens, " tokens need ", fixed,
                                                       " B"));
    }
    base.expert_budget_bytes = room;
    out.plan.expert_cache_bytes = std::min<int64_t>(room, out.plan.expert_total_bytes);
  }
  out.report = absl::StrCat(out.plan.ToString(), "; KV for ", kv_tokens, " tokens ", out.kv_bytes, " B");
  // The expert cache only grows on demand; what must be available up front is
  // the resident set, the KV and one MoE layer's working set of experts.
  const int64_t need = fixed + out.plan.experts_per_token_bytes;
  const int64_t avail = MemAvailableBytes();
  if (avail > 0 && need > avail) {
    return absl::ResourceExhaustedError(absl::StrCat("memory plan needs at least ", need, " B (resident weights ",
                                                     out.plan.resident_bytes, " B + KV ", out.kv_bytes,
                                                     " B + one layer's experts ", out.plan.experts_per_token_bytes,
                                                     " B) but only ", avail,
                                                     " B are available (MemAvailable); refusing to load"));
  }
  out.config = base;
  return out;
}

}  // namespace moe
