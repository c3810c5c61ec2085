#include "services/expertd/metrics.h"

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace moe::expertd {

using namespace expertstore;

namespace {

class StoreCollectable final : public prometheus::Collectable {
 public:
  explicit StoreCollectable(ExpertStore* store) : store_(store) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    StoreStats s = store_->Stats();
    std::vector<prometheus::MetricFamily> out;
    auto add = [&](const char* name, const char* help, prometheus::MetricType type, double v) {
      prometheus::MetricFamily f{name, help, type, {}};
      prometheus::ClientMetric m;
      if (type == prometheus::MetricType::Counter) {
        m.counter.value = v;
      } else {
        m.gauge.value = v;
      }
      f.metric.push_back(m);
      out.push_back(std::move(f));
    };
    using T = prometheus::MetricType;
    prometheus::MetricFamily hits{"moe_expertd_tier_hits_total", "experts served, by tier", T::Counter, {}};
    prometheus::MetricFamily bytes{"moe_expertd_tier_bytes_total", "bytes delivered, by tier", T::Counter, {}};
    for (int t = 0; t < kNumTiers; ++t) {
      prometheus::ClientMetric m;
      m.label.push_back({"tier", TierName(static_cast<TierId>(t))});
      m.counter.value = double(s.tier[t].hits);
      hits.metric.push_back(m);
      m.counter.value = double(s.tier[t].bytes);
      bytes.metric.push_back(m);
    }
    out.push_back(std::move(hits));
    out.push_back(std::move(bytes));
    add("moe_expertd_requests_total", "experts requested over RPC (misses of the shm table)", T::Counter,
        double(s.requests));
    add("moe_expertd_shm_hits_total", "leases taken by workers in shared memory", T::Counter, double(s.shm_hits));
    add("moe_expertd_evictions_total", "slabs evicted", T::Counter, double(s.evictions));
    add("moe_expertd_read_errors_total", "failed record reads (I/O, short, checksum)", T::Counter,
        double(s.read_errors));
    add("moe_expertd_prefetch_issued_total", "reads started from hints", T::Counter, double(s.prefetch_issued));
    add("moe_expertd_prefetch_used_total", "prefetched records later requested", T::Counter, double(s.prefetch_used));
    add("moe_expertd_prefetch_refused_total", "hints refused by admission", T::Counter, double(s.prefetch_refused));
    add("moe_expertd_prefetch_promoted_total", "look-ahead reads a fetch joined in flight (made demand)", T::Counter,
        double(s.prefetch_promoted));
    add("moe_expertd_prefetch_gated_total", "look-ahead misses not read: prefetch gate closed", T::Counter,
        double(s.prefetch_gated));
    add("moe_expertd_lookahead_kept_total", "look-ahead hints for resident experts (kept until their layer runs)",
        T::Counter, double(s.lookahead_kept));
    add("moe_expertd_prefetch_gate_open", "1 while look-ahead hints are read", T::Gauge,
        s.prefetch_gate_open ? 1.0 : 0.0);
    add("moe_expertd_prefetch_precision", "decayed share of look-ahead fills used (gate's p)", T::Gauge,
        s.prefetch_precision);
    add("moe_expertd_policy_horizon_tokens", "learned eviction order: mean age of evicted experts (tokens)",
        T::Gauge, s.policy_horizon_tokens);
    add("moe_expertd_hit_log_lost_total", "shm hits the placement policy never saw (a worker's hit log lapped)",
        T::Counter, double(s.hit_log_lost));
    add("moe_expertd_demand_busy", "decayed share of time fetches waited for reads (gate's u)", T::Gauge,
        s.demand_busy);
    add("moe_expertd_arena_bytes", "shared-memory arena size", T::Gauge, double(s.arena_bytes));
    add("moe_expertd_budget_bytes", "active budget", T::Gauge, double(s.budget_bytes));
    add("moe_expertd_resident_bytes", "bytes of resident experts (slab capacity)", T::Gauge, double(s.resident_bytes));
    add("moe_expertd_slabs_ready", "slabs holding a verified expert", T::Gauge, double(s.slabs_ready));
    add("moe_expertd_slabs_leased", "slabs leased by at least one worker", T::Gauge, double(s.slabs_leased));
    add("moe_expertd_sessions", "attached worker sessions", T::Gauge, double(s.sessions));
    add("moe_expertd_io_inflight", "read chunks in flight", T::Gauge, double(s.io_inflight));
    add("moe_expertd_io_queue_depth", "configured queue depth", T::Gauge, double(s.queue_depth));
    add("moe_expertd_read_gbps", "disk read throughput while busy (GB/s)", T::Gauge, s.read_gbps);
    return out;
  }

 private:
  ExpertStore* store_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsExporter>> MetricsExporter::Start(ExpertStore* store, const std::string& addr) {
  if (addr.empty() || absl::StartsWith(addr, "0.0.0.0") || absl::StartsWith(addr, "[::]") || addr[0] == ':')
    return absl::InvalidArgumentError(absl::StrCat("--metrics-addr '", addr,
                                                   "': bind a specific address (e.g. 127.0.0.1:9464), not a wildcard"));
  auto m = std::unique_ptr<MetricsExporter>(new MetricsExporter());
  try {
    m->exposer_ = std::make_unique<prometheus::Exposer>(addr);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("--metrics-addr ", addr, ": ", e.what()));
  }
  auto c = std::make_shared<StoreCollectable>(store);
  m->exposer_->RegisterCollectable(c);
  m->collectable_ = c;
  return m;
}

MetricsExporter::~MetricsExporter() = default;

int MetricsExporter::port() const {
  auto p = exposer_->GetListeningPorts();
  return p.empty() ? 0 : p[0];
}

}  // namespace moe::expertd
