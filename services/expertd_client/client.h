// ExpertdClient: a worker's connection to expertd.
//
// Hit path: TryLease reads the shared table and takes a lease with atomics
// (no RPC, ~0.1 us). Miss path: Acquire sends one FetchExperts RPC per layer
// for the ids that missed and waits until expertd has read them; the
// returned leases point into the read-only arena mapping. Release drops a
// lease in shared memory. When the process dies, the kernel closes the
// session socket and expertd drops its leases within a second.
//
// expertd restarts: when an RPC finds expertd gone or the session unknown (or
// CheckAlive sees the session socket closed), the client re-attaches (new
// session, new shm) once, waiting at most 2 s for it, and retries. Leases
// granted by the old instance stay readable (its mappings are kept) and
// their Release is a no-op.
//
// Admin-only clients (moe heat) use ConnectAdmin: no session, no shm.
//
// Thread safety: TryLease/Acquire/Release/Hint are safe from many threads
// (the table is lock-free, the gRPC stub is thread-safe).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/expertstore/expert_table.h"
#include "common/expertstore/shm_region.h"
#include "proto/expertd.grpc.pb.h"

namespace moe::expertd {

class ExpertdClient {
 public:
  // `addr`: unix socket path of expertd ("unix:" prefix optional).
  static absl::StatusOr<std::unique_ptr<ExpertdClient>> Connect(const std::string& addr,
                                                                const std::string& name = "worker");
  static absl::StatusOr<std::unique_ptr<ExpertdClient>> ConnectAdmin(const std::string& addr);
  ~ExpertdClient();  // detaches

  uint32_t num_layers() const { return num_layers_; }
  uint32_t num_experts() const { return num_experts_; }
  const std::string& model_id() const { return model_id_; }
  uint32_t session() const;
  uint64_t reconnects() const { return reconnects_; }

  std::optional<expertstore::Lease> TryLease(int layer, int expert);
  // Leases every id of one layer and hands each to `ready` as soon as it is
  // leased: the shm hits first (after the one FetchExperts RPC for the misses
  // went out, so expertd reads them meanwhile), then each miss as expertd
  // streams it. `ready` runs on the calling thread, once per index; a bad id
  // or record fails only itself; `shm_hit`: leased in shared memory (no
  // read). Acquire collects the same into request order. `server_wait_ns`
  // (optional) adds expertd's own time making the misses resident (the last
  // reply's FetchReply.server_wait_ns of each stream).
  // `prefill`: the ids are a prefill pass's (FetchRequest.prefill): expertd streams the misses
  // without evicting the decode working set (ExpertStore::FetchUse::kPrefill).
  using AcquireReady = std::function<void(size_t index, absl::StatusOr<expertstore::Lease> lease, bool shm_hit)>;
  void AcquireEach(int layer, const std::vector<int>& ids, const AcquireReady& ready,
                   uint64_t* server_wait_ns = nullptr, bool prefill = false);
  std::vector<absl::StatusOr<expertstore::Lease>> Acquire(int layer, const std::vector<int>& ids,
                                                          uint64_t* server_wait_ns = nullptr);
  void Release(const expertstore::Lease& lease);
  // OK while expertd holds our session. Its session socket closes when expertd exits: then
  // one fail-fast re-attach is tried (a restarted expertd is found at once); Unavailable,
  // naming expertd, when that fails. Cheap (a poll) while all is well.
  absl::Status CheckAlive();
  // Prefetch hint (router look-ahead or current routing); returns reads started.
  absl::StatusOr<uint32_t> Hint(int layer, const std::vector<int>& ids, bool lookahead = true);
  absl::Status Detach();

  // Admin.
  absl::StatusOr<StatsReply> Stats();
  absl::StatusOr<HeatReply> Heat();
  absl::Status Pin(int layer, int expert, bool pinned);
  absl::StatusOr<uint64_t> SetBudget(uint64_t bytes);

 private:
  // One attachment to one expertd instance.
  struct Conn {
    expertstore::ShmRegion ctl, arena;
    expertstore::ExpertTable table;
    int fd = -1;
    uint32_t session = 0;
    uint64_t token = 0;
    uint64_t epoch = 0;
    std::atomic<bool> detached{false};
    ~Conn();
  };
  ExpertdClient() = default;
  absl::StatusOr<std::shared_ptr<Conn>> Attach(uint64_t epoch, std::chrono::milliseconds wait);
  // Re-attaches if `seen` is still the current connection.
  absl::Status Reconnect(const std::shared_ptr<Conn>& seen, std::chrono::milliseconds wait);

  std::string addr_, name_;
  std::unique_ptr<ExpertD::Stub> stub_;
  std::atomic<std::shared_ptr<Conn>> conn_;
  std::mutex reconnect_mu_;
  std::vector<std::shared_ptr<Conn>> retired_;  // old instances: leases may still point into them
  std::atomic<uint64_t> reconnects_{0};
  uint32_t num_layers_ = 0, num_experts_ = 0;
  std::string model_id_;
};

absl::Status FromGrpc(const grpc::Status& s);

}  // namespace moe::expertd
