// ExpertdClient: a worker's connection to expertd.
//
// Hit path: TryLease reads the shared table and takes a lease with atomics
// (no RPC, ~0.1 us). Miss path: Acquire sends one FetchExperts RPC per layer
// for the ids that missed and waits until expertd has read them; the
// returned leases point into the read-only arena mapping. Release drops a
// lease in shared memory. When the process dies, the kernel closes the
// session socket and expertd drops its leases within a second.
//
// Admin-only clients (moe heat) use ConnectAdmin: no session, no shm.
//
// Thread safety: TryLease/Acquire/Release/Hint are safe from many threads
// (the table is lock-free, the gRPC stub is thread-safe).
#pragma once

#include <memory>
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
  uint32_t session() const { return session_; }

  std::optional<expertstore::Lease> TryLease(int layer, int expert);
  // Leases every id of one layer: shm hits first, one RPC for the rest.
  // One result per id, in order; a bad id or record fails only itself.
  std::vector<absl::StatusOr<expertstore::Lease>> Acquire(int layer, const std::vector<int>& ids);
  void Release(const expertstore::Lease& lease);
  // Prefetch hint (router look-ahead or current routing); returns reads started.
  absl::StatusOr<uint32_t> Hint(int layer, const std::vector<int>& ids, bool lookahead = true);
  absl::Status Detach();

  // Admin.
  absl::StatusOr<StatsReply> Stats();
  absl::StatusOr<HeatReply> Heat();
  absl::Status Pin(int layer, int expert, bool pinned);
  absl::StatusOr<uint64_t> SetBudget(uint64_t bytes);

 private:
  ExpertdClient() = default;
  std::unique_ptr<ExpertD::Stub> stub_;
  expertstore::ShmRegion ctl_, arena_;
  expertstore::ExpertTable table_;
  int session_fd_ = -1;
  uint32_t session_ = 0;
  uint64_t token_ = 0;
  bool attached_ = false;
  uint32_t num_layers_ = 0, num_experts_ = 0;
  std::string model_id_;
};

absl::Status FromGrpc(const grpc::Status& s);

}  // namespace moe::expertd
