// RemoteExpertSource: the engine's ExpertSource (common/expert_source/expert_source.h)
// backed by expertd. A hit is a lease from the shared table (no RPC); the
// misses of a layer are one FetchExperts stream that delivers each record as
// expertd has read it (GetEach; Get is the one-expert case).
// Matrix shapes and formats come from the worker's own container (it maps
// the dense weights from it anyway); the bytes come from expertd's arena.
//
// Contract (as ExpertSource): Get returns the exact stored bytes (expertd
// verified the record's CRC before publishing it) and blocks until resident;
// the bytes stay valid until the lease is destroyed (the shared-memory lease
// is dropped then). Hint never blocks: it queues the keys for a background
// thread that sends one Hint RPC per layer, dropping hints when the queue is
// full. Leases must be destroyed before the source.
//
// Thread safety: Get/Hint/Stats from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/format/container.h"
#include "common/expert_source/expert_source.h"
#include "services/expertd_client/client.h"

namespace moe::expertd {

class RemoteExpertSource final : public ExpertSource {
 public:
  // `container` must outlive the source and be the model expertd serves
  // (checked by shape).
  static absl::StatusOr<std::unique_ptr<RemoteExpertSource>> Connect(const std::string& addr,
                                                                     const Container* container);
  ~RemoteExpertSource() override;

  absl::StatusOr<ExpertLease> Get(int layer, int expert) override;
  // One FetchExperts stream for the layer's misses; each lease is handed
  // over as it lands (ExpertdClient::AcquireEach), hits first. kPrefill
  // sends FetchRequest.prefill (expertd's no-pollution admission).
  absl::Status GetEach(int layer, std::span<const int> experts, const ExpertReady& ready, FetchUse use) override;
  // Hint: the engine's routing of the layer it is about to fetch (expertd
  // fills it like demand). HintAhead: router look-ahead predictions
  // (expertd treats them as speculative: admission-gated, capped, and keeps
  // the resident ones through the current layer's fills). Look-ahead hints
  // are sent first.
  void Hint(std::span<const ExpertKey> keys) override;
  void HintAhead(std::span<const ExpertKey> keys) override;
  ExpertSourceStats Stats() const override;
  // expertd's session alive (ExpertdClient::CheckAlive: re-attaches to a restarted one).
  absl::Status Health() override { return client_->CheckAlive(); }

 private:
  RemoteExpertSource() = default;
  ExpertLease MakeLease(const expertstore::Lease& l, const ExpertRecordInfo& rec);
  void HintLoop();
  void Queue(std::span<const ExpertKey> keys, bool lookahead);

  std::unique_ptr<ExpertdClient> client_;
  const Container* container_ = nullptr;
  std::atomic<int64_t> gets_{0}, hits_{0}, misses_{0}, bytes_{0};
  std::atomic<int64_t> wait_ns_{0}, ipc_ns_{0};  // Stats().fetch_wait_seconds / ipc_seconds
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<ExpertKey, bool>> hints_;  // (key, look-ahead)
  bool stop_ = false;
  std::thread hint_thread_;
};

// The factory behind `--expertd ADDR` (EngineConfig::expert_source's type,
// declared here without the model layer): connects when the engine hands it
// the opened container; errors are prefixed "--expertd ADDR: ".
using ContainerSourceFactory = std::function<absl::StatusOr<std::unique_ptr<ExpertSource>>(const Container&)>;
ContainerSourceFactory RemoteSourceFactory(const std::string& addr);

}  // namespace moe::expertd
