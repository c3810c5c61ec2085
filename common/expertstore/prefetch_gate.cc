#include "common/expertstore/prefetch_gate.h"

#include <cmath>

namespace moe::expertstore {

namespace {
// Weight the old average keeps after dt_ns of a constant signal.
double Keep(uint64_t dt_ns, double tau_s) { return tau_s > 0 ? std::exp(-double(dt_ns) * 1e-9 / tau_s) : 0.0; }
}  // namespace

double PrefetchGate::demand_busy(uint64_t now_ns) const {
  if (t_ == 0 || now_ns <= t_) return busy_;
  double k = Keep(now_ns - t_, cfg_.busy_tau_s);
  return busy_ * k + (waiting_ ? 1.0 : 0.0) * (1 - k);
}

void PrefetchGate::DemandWaiting(bool waiting, uint64_t now_ns) {
  busy_ = demand_busy(now_ns);
  if (now_ns > t_) t_ = now_ns;
  waiting_ = waiting;
}

void PrefetchGate::Resolved(bool used) {
  used_ = used_ * cfg_.precision_decay + (used ? 1.0 : 0.0);
  resolved_ = resolved_ * cfg_.precision_decay + 1.0;
}

}  // namespace moe::expertstore
