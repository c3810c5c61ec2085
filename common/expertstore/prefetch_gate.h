// PrefetchGate: should expertd issue look-ahead (speculative) reads now?
//
// Problem in numbers (docs/BENCHMARKS.md, expertd e2e, quiet machine, 2
// layers x 64 GLM-5 experts): look-ahead prefetch (the next layer's router
// on this layer's state, ~72% right) cost 20% tok/s at a 10% budget
// (5.60 -> 4.46) and 8% at 50% (19.59 -> 17.96), and gained 52% at 100%
// (46.9 -> 71.1). At 10% a token waits 161 of its ~178 ms for FetchExperts:
// the disk is saturated by demand reads, so a prediction's read moves no
// bytes earlier and a wrong one (28%) takes bandwidth and a slab away.
//
// Rule (one comparison): let u = share of recent wall time in which a
// demand fetch waited (for a read or a slab), decayed with a 1 s time
// constant, and p = look-ahead precision, the decayed share of resolved
// look-ahead fills that a demand fetch used (a fill resolves when a fetch
// uses it, or unused when its slab is evicted or its read fails; decay 0.95
// per resolution, ~20 most recent). A read started now overlaps demand
// waiting with probability ~u: there a right guess gains nothing (the bytes
// had to be read anyway, at the same bandwidth) and a wrong one costs a
// read's worth of demand time, (1-p)u; in idle time (1-u) a right guess
// takes the read off the next fetch, p(1-u), and a wrong one costs only a
// slab. Issue while p(1-u) >= (1-p)u, i.e. while p >= u. With the numbers
// above: 10% budget u ~ 0.9 > p ~ 0.7, closed; 100% u ~ 0.05, open; 50%
// u ~ 0.7 ~ p, decided by the measured precision. While closed, p keeps its
// last value (nothing new resolves) and u alone reopens the gate when demand
// waits drop (e.g. the budget grows). Start: p = 1/2 (one pseudo-hit of two
// pseudo-resolutions), u = 0: open. The store asks the gate only for fills
// that would evict: one into a free slab (a warming arena) costs no slab and
// its reads use only spare disk capacity (IoConfig::max_speculative_inflight).
//
// Deterministic: time comes in as arguments (ns on any monotonic clock).
// Not thread-safe: the store calls it under its lock.
#pragma once

#include <cstdint>

namespace moe::expertstore {

struct PrefetchGateConfig {
  bool enabled = true;            // false: always allow (A/B against the old behaviour)
  double busy_tau_s = 1.0;        // time constant of the demand-waiting average
  double precision_decay = 0.95;  // weight kept per resolved look-ahead fill
  // Admission of a look-ahead fill that evicts: weigh the prediction by the
  // measured precision p (HeatPolicy::Admits) instead of treating it as
  // certain, so a wrong guess (1 - p of them) does not evict a key worth more
  // than the guess is on average.
  bool weigh_admission = false;
};

class PrefetchGate {
 public:
  explicit PrefetchGate(PrefetchGateConfig c = {}) : cfg_(c) {}

  // Demand fetches started (true) or stopped (false) waiting for the disk.
  void DemandWaiting(bool waiting, uint64_t now_ns);
  // A look-ahead fill resolved: used by a demand fetch, or gone unused.
  void Resolved(bool used);
  // The decision for a look-ahead hint arriving now.
  bool Allow(uint64_t now_ns) const { return !cfg_.enabled || precision() >= demand_busy(now_ns); }

  double precision() const { return used_ / resolved_; }
  double demand_busy(uint64_t now_ns) const;  // u in [0, 1]
  bool enabled() const { return cfg_.enabled; }

 private:
  PrefetchGateConfig cfg_;
  bool waiting_ = false;
  double busy_ = 0;       // u at t_
  uint64_t t_ = 0;        // last DemandWaiting call (0: none yet)
  double used_ = 1, resolved_ = 2;
};

}  // namespace moe::expertstore
