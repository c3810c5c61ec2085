#include "services/inferd/step_planner.h"

#include <algorithm>

namespace moe::inferd {

StepPlan PlanStep(const std::vector<PlanInput>& seqs, int64_t max_step_tokens, int64_t prefill_chunk) {
  StepPlan plan;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (seqs[i].prefill_remaining == 0 && !seqs[i].hold) {
      plan.entries.push_back({i, 1, true});
      ++plan.total_tokens;
    }
  }
  int64_t budget = std::max<int64_t>(max_step_tokens - plan.total_tokens, 0);
  // At least one prefill chunk per step so prompts always advance.
  if (budget == 0) budget = std::min<int64_t>(prefill_chunk, 1);
  for (size_t i = 0; i < seqs.size() && budget > 0; ++i) {
    int64_t rem = seqs[i].prefill_remaining;
    if (rem == 0 || seqs[i].hold) continue;
    int64_t n = std::min({rem, prefill_chunk, budget});
    plan.entries.push_back({i, n, n == rem});
    plan.total_tokens += n;
    budget -= n;
  }
  return plan;
}

}  // namespace moe::inferd
