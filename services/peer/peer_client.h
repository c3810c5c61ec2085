// PeerClient: the engine's RemoteExperts over gRPC (proto/peer.proto) to the
// other hosts of an expert-parallel group (docs/MULTIHOST.md).
//
// Start sends one RunExperts per owning host, all in flight at once, each
// with a deadline; Wait collects them. Whatever fails comes back empty and
// the engine computes it from this host's own expert source: a timeout, a
// refused call (wrong token, model identity or epoch: the owner says which),
// an unreachable host, a reply of the wrong shape, or a record CRC that is not
// this host's (the hosts hold different bytes for that expert). A host that
// fails is suspect for `suspect_for`: its experts run here meanwhile (no
// step waits on a dead host more than once per period), then it is tried again.
// Thread safety: Place, FetchWeights, Start and stats from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/expert_source/remote_experts.h"
#include "services/peer/ownership_map.h"
#include "services/peer/peer_tls.h"

namespace moe::peer {

struct PeerClientOptions {
  int self = 0;                // this host's index in the map
  std::string token;           // the group's bearer token
  std::string model_identity;  // this engine's state identity (the owners must have the same)
  PeerTls tls;                 // mTLS to the owners (disabled: plaintext + token)
  // A call's deadline: deadline + per_expert x its jobs (a cold owner reads
  // each of them from disk first: ~15 ms for a 21 MB record at 1.4 GB/s).
  std::chrono::milliseconds deadline{250};
  std::chrono::milliseconds per_expert{50};
  std::chrono::milliseconds suspect_for{10000};
  // This host's record CRC of (layer, expert); 0: unknown (not a container).
  std::function<uint32_t(int layer, int expert)> record_crc;
  // The record's bytes, and the bytes one row costs on the wire (its input
  // and its output, ~4 x hidden at bf16): an expert whose rows cost more than
  // its record is read here instead. 0: always send.
  std::function<int64_t(int layer, int expert)> record_bytes;
  int64_t row_wire_bytes = 0;
  // Such an expert's weights come from its owner (FetchExpert) instead of
  // this host's source: for networks faster than the local disk.
  bool fetch_weights = false;
  // FetchExpert's deadline: deadline + the record's bytes at this rate.
  double fetch_min_bytes_per_second = 100e6;
};

struct PeerClientStats {
  int64_t calls = 0, failed_calls = 0;
  int64_t remote_jobs = 0, fallback_jobs = 0;  // (layer, expert) jobs sent / computed here after a failure
  int64_t bytes_sent = 0, bytes_received = 0;  // message payloads (x and y rows)
  int64_t suspect_marks = 0;
  int64_t fetched_experts = 0, fetch_failures = 0, fetched_bytes = 0;  // FetchExpert
};

class PeerClient final : public RemoteExperts {
 public:
  // InvalidArgument when self is not a host of the map or the token is empty.
  static absl::StatusOr<std::unique_ptr<PeerClient>> Create(OwnershipMap map, PeerClientOptions opt);
  ~PeerClient() override;

  Placement Place(int layer, int expert, int64_t rows) const override;
  absl::StatusOr<ExpertLease> FetchWeights(int layer, int expert) override;
  std::unique_ptr<RemoteExpertCall> Start(int layer, const float* x, int64_t S, int64_t H,
                                          std::span<const RemoteExpertJob> jobs) override;
  PeerClientStats stats() const;
  const OwnershipMap& map() const { return map_; }

  struct Host;

 private:
  PeerClient() = default;
  friend class PeerCall;
  void MarkFailed(int host, const std::string& why);
  OwnershipMap map_;
  PeerClientOptions opt_;
  std::vector<std::unique_ptr<Host>> hosts_;
  mutable std::mutex mu_;
  PeerClientStats stats_;
};

}  // namespace moe::peer
