// Offline cache simulation for `moe bench cache`: replays a routing trace
// through plain LRU, our HeatPolicy, and Belady's offline optimum (evict the
// key whose next use is furthest away), all with the same number of
// equal-size slots, demand fills only.
//
// Traces: routing_trace.h (the file format, RoutingTrace).
// Synthetic traces mimic GLM-5 routing: per layer a Zipf popularity over a
// random permutation of experts, a chance to keep each of the previous
// token's experts (temporal locality), and topic shifts that re-permute part
// of the popularity every `phase_tokens` tokens.
//
// Thread safety: pure functions over their arguments.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/expertstore/policy.h"
#include "common/expertstore/routing_trace.h"

namespace moe::expertstore {

struct SyntheticTraceConfig {
  uint32_t num_layers = 75;  // GLM-5: 78 layers, the first 3 dense
  uint32_t num_experts = 256;
  uint32_t top_k = 8;
  uint32_t num_tokens = 2000;
  double zipf_s = 0.9;
  double keep_prob = 0.35;   // per expert of the previous token
  uint32_t phase_tokens = 400;
  double phase_shuffle = 0.3;  // fraction of popularity ranks re-drawn per phase
  uint64_t seed = 1;       // popularity permutations and phase shifts
  uint64_t draw_seed = 0;  // the routing draws (0: derived from seed)
};

RoutingTrace MakeSyntheticTrace(const SyntheticTraceConfig& c);
// Fills t.ahead with simulated router look-ahead: for each row followed by
// the next layer of the same token, that row's experts, each one kept with
// probability `accuracy` and otherwise replaced by a wrong expert of that
// layer (colibri measured ~72% right for GLM-5's look-ahead).
void AddLookahead(RoutingTrace& t, double accuracy, uint64_t seed);

struct SimResult {
  uint64_t accesses = 0;
  uint64_t hits = 0;
  double hit_rate() const { return accesses ? double(hits) / double(accesses) : 0.0; }
  std::vector<double> weights;  // SimulateHeat, learned order: the model's final weights
  std::string heat;             // SimulateHeat: the policy's persisted state at the end
  absl::Status status;          // SimulateHeat: a warm state that could not be restored
  // SimulateHeat: what one score costs (ns per key, all keys scored 8 times
  // on the final state; heat: LiveScore, what a re-rank pays per key).
  double score_ns = 0;
  // SimulateHeat: one eviction decision on the final state as expertd makes
  // it per miss (HeatPolicy::EvictFirst up to the victim, nothing evicted):
  // ns per decision, over `decision_candidates` residents; scan_ns: the same
  // decision by one live score per resident (how expertd chose before
  // EvictFirst).
  double decision_ns = 0, scan_ns = 0;
  uint64_t decision_candidates = 0;
  // ReplayOptions::time_policy (heat order): every decision of the replay
  // timed (EvictFirst, the victim dropped from the policy's index), and the
  // policy's per-access work (Touch, with the re-ranks it does), ns each,
  // less timer_ns (what one steady_clock pair costs here).
  uint64_t decisions = 0;
  double evict_ns = 0, touch_ns = 0, timer_ns = 0;
};

SimResult SimulateLru(const RoutingTrace& t, uint64_t slots);

struct ReplayOptions {
  // Learned order only: eviction candidates sampled per miss (the lowest
  // score among `sample` random residents: its scores move continuously and
  // an exact scan over thousands of slots per miss makes long replays slow;
  // expertd scans exactly). The heat order decides exactly, as expertd does
  // (HeatPolicy::EvictFirst).
  int sample = 64;
  // > 0: hits reach the policy the way expertd sees workers' shared-memory
  // leases: counted per key and handed over every that many accesses, in key
  // order (misses reach it at once, as FetchExperts does).
  uint64_t harvest_every = 0;
  // A row's keys are never victims of its own misses, as when the worker
  // leases the row's hits before it fetches the misses (`moe bench e2e`'s
  // worker; the engine instead leases one expert at a time). This matters
  // only when the cache holds a few rows (tiny traces at 6-10 slots).
  bool row_leases = false;
  // Set: the policy starts from this persisted state (a heat file's
  // bytes, HeatPolicy::Snapshot), as expertd restarted with --heat-file;
  // the cache itself starts empty. Its model identity must be kReplayModelId.
  const std::string* warm_heat = nullptr;
  // Time the policy's calls as the replay makes them (SimResult::evict_ns,
  // touch_ns): for `moe bench cache --decision-cost`.
  bool time_policy = false;
};
inline constexpr char kReplayModelId[] = "moe-bench-cache-replay";

// Our policy (learned or heat order, per c.learned). The learned order is
// trained as in expertd: one random resident observed per access, fills and
// evictions reported. accesses_per_token is AccessesPerToken(t). t.ahead,
// when present, reaches the policy as look-ahead hints (HeatPolicy::Expect)
// before each row, as expertd gets them. SimResult::heat is the policy's
// persisted state at the end (what expertd would save).
SimResult SimulateHeat(const RoutingTrace& t, uint64_t slots, PolicyConfig c, const ReplayOptions& o = {});
SimResult SimulateBelady(const RoutingTrace& t, uint64_t slots, bool bypass = true);
// A reference for what knowing the near future is worth: our policy (heat
// score, with c) that is also told the true routing of the next
// `future_rows` rows (a row = one token x MoE layer; 1 = the next layer, as
// router look-ahead predicts it, but always right; the number of MoE layers
// = one whole token ahead). A victim is the first resident EvictFirst offers
// that is not used within that window; if every resident is, the one used
// last in it (Belady inside the window). Demand fills, no bypass. The engine's
// look-ahead knows less than future_rows = 1 (it is ~60-72% right), so where
// even a few rows of perfect foresight close little of the LRU->Belady gap,
// no online policy can close more from look-ahead.
SimResult SimulateNearFuture(const RoutingTrace& t, uint64_t slots, uint64_t future_rows, PolicyConfig c);
// The best fixed placement in hindsight: the `slots` keys the whole trace
// uses most, each kept from its first use (a compulsory miss, as for the
// others), nothing else ever admitted. A
// frequency-only policy that knew the trace's counts in advance gets this;
// where it lies far below Belady, the gap is order, not popularity.
SimResult SimulateStaticBest(const RoutingTrace& t, uint64_t slots);
// What a demand policy could reach on a synthetic trace if it knew the
// generator's distribution: it is told each phase's expected expert
// frequencies (measured on `replicates` other traces with the same
// popularity and phases but independent draws) and the reuse chance, and
// evicts the key least likely to be used within the next 4 tokens (q + 3p:
// q the chance at its layer's next visit, p the phase frequency; the horizon
// barely matters between 2 and 20 tokens). Belady additionally knows the
// draws themselves, which no online policy can.
// phase_counts: told only when each phase begins (and the reuse chance), p
// is estimated from the phase's accesses so far, with the previous phase's
// frequencies as a prior worth 50 tokens: what a perfect change detector is
// worth to a count-based estimate (a reference, not a bound: a better tuned
// estimator can beat it).
// later_weight: the rule is q + later_weight * p (3: "within 4 tokens"); at
// small budgets a short horizon is the better rule (bench cache
// --informed-weights tries several and reports the best).
SimResult SimulateInformed(const RoutingTrace& t, uint64_t slots, const SyntheticTraceConfig& c, int replicates = 8,
                           int sample = 64, bool phase_counts = false, double later_weight = 3.0);

}  // namespace moe::expertstore
