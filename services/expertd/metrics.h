// Prometheus export of expertd's counters: a Collectable that reads
// ExpertStore::Stats on each scrape (no stale copies, no extra thread).
// Metric names: moe_expertd_* (see metrics.cc); tier-labelled hits/bytes.
//
// Thread safety: Collect may run on the exposer's threads; Stats is
// thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/expertstore/store.h"

namespace prometheus {
class Exposer;
}

namespace moe::expertd {

class MetricsExporter {
 public:
  // Serves /metrics at `addr` ("127.0.0.1:9464"). Refuses wildcard binds.
  static absl::StatusOr<std::unique_ptr<MetricsExporter>> Start(expertstore::ExpertStore* store,
                                                                const std::string& addr);
  ~MetricsExporter();
  int port() const;

 private:
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<void> collectable_;
};

}  // namespace moe::expertd
