// Plans one engine step over the active sequences (vLLM-style: the planner
// only plans; the batcher executes and feeds results back).
//
// Policy: every decoding sequence gets its one token (decode first: a step
// never stalls token streams); the remaining budget of `max_step_tokens`
// goes to prompts still being prefilled, in arrival order, each at most
// `prefill_chunk` tokens. A long prompt is therefore spread over many steps
// that also advance everybody else's decode, and a new short prompt starts
// its prefill in the very next step (no request waits for another's whole
// prefill). Held inputs (PlanInput::hold: the batcher feeds their prompt in a
// layer-major pass instead, batcher.h) get nothing.
// Thread safety: pure function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace moe::inferd {

struct PlanInput {
  int64_t prefill_remaining = 0;  // prompt tokens not yet fed (0: decoding)
  bool hold = false;              // not planned this step (its prompt goes in a layer-major pass)
};

struct PlanEntry {
  size_t index = 0;      // into the inputs
  int64_t tokens = 0;    // tokens to feed this step
  bool samples = false;  // this step ends its prompt (or is a decode): sample a token
};

struct StepPlan {
  std::vector<PlanEntry> entries;
  int64_t total_tokens = 0;
};

StepPlan PlanStep(const std::vector<PlanInput>& seqs, int64_t max_step_tokens, int64_t prefill_chunk);

}  // namespace moe::inferd
