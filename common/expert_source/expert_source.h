// ExpertSource: where the engine gets routed-expert weights from.
//
// Problem in numbers: GLM-5 has 75 MoE layers x 256 experts = 19,200 experts
// (plus the MTP layer's 256), each three matrices [2048 x 6144] = 37.7 M
// weights, i.e. ~75 MB at bf16 / ~19 MB at 4 bits. The set does not fit in
// RAM on one machine, so every MoE layer asks a source for the 8 experts each
// token routes to. A source may be an in-process LRU over a local file
// (LocalExpertSource, common/model/local_expert_source.h), or a remote expertd
// (RemoteExpertSource, the expertd client). This header sits below both the
// engine and the client (it needs only the stored-matrix formats of
// common/format/qformat.h), so neither depends on the other.
//
// Contract (every implementation must honour it; tests rely on it):
//  * Get(layer, expert) returns a lease on the expert's three matrices
//    (gate [Im, H], up [Im, H], down [H, Im]; y = x . W^T, layout per
//    common/format/qformat.h). The pointed-to bytes stay valid and unchanged
//    until the lease is destroyed (RAII); the source may evict the expert only
//    after every lease on it is gone. Leases are move-only and must be
//    destroyed before the source.
//  * Get either returns the exact stored weights or an error (NotFound for an
//    unknown (layer, expert), Unavailable/DataLoss for I/O failures); it never
//    returns different numbers for the same key during the source's life.
//    Results never depend on budget, eviction order, hints or concurrency.
//  * Get blocks until the weights are resident (that is the point of it).
//  * GetEach(layer, experts, ready) is Get for one layer's experts with the
//    waiting pipelined: each lease goes to `ready` as soon as that expert is
//    resident (a remote source: its shm hits first, then each miss as its
//    read lands), so the caller computes one expert while the others are
//    still being read. `ready` runs on the calling thread, exactly once per
//    index, in arrival order; the order must not change any result (callers
//    combine by index). GetEach returns the first error (of a Get or of
//    `ready`); leases after it are released unused. Default: Get in order.
//    `use` says who asks: kPrefill marks experts only a prefill pass needs
//    (most are used once per prompt): a source streams them without
//    evicting the decode working set (expertd: FetchRequest.prefill; the
//    in-process LRU: misses enter at its cold end, hits are not refreshed).
//    It never changes the bytes returned.
//  * Hint(keys) announces experts likely needed soon (e.g. the next layer's
//    predicted routing). It never blocks on I/O, never fails, never changes
//    any result, and may be ignored entirely. A hinted expert that is never
//    fetched is simply dropped.
//  * HintAhead(keys) is a prediction, not the routing: the next MoE layer's
//    router applied to this layer's state (router look-ahead, ~72% right on
//    GLM-5). Same contract as Hint; a source may give it lower priority or
//    refuse it (expertd: admission-gated). Default: ignored.
//  * Thread safety: Get, Hint and Stats may be called concurrently from any
//    threads. A lease may be released on any thread.
//  * The engine calls Get once per distinct (layer, expert) per batch: a
//    prefill/verify of S rows fetches each routed expert of a layer once and
//    applies it to all rows that chose it.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <utility>

#include "absl/status/statusor.h"
#include "common/format/qformat.h"

namespace moe {

// One stored matrix W[rows, cols] (y = x . W^T) in a qformat.h format.
// `scales` is null for f32/bf16. Non-owning.
struct ExpertMatrix {
  QFormat format = QFormat::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const uint8_t* data = nullptr;
  const float* scales = nullptr;

  int64_t Bytes() const { return DataBytes(format, rows, cols) + ScaleBytes(format, rows, cols); }
};

// The three matrices of one routed expert.
struct ExpertWeights {
  ExpertMatrix gate;  // [Im, H]
  ExpertMatrix up;    // [Im, H]
  ExpertMatrix down;  // [H, Im]

  int64_t Bytes() const { return gate.Bytes() + up.Bytes() + down.Bytes(); }
};

// Who a fetch is for (GetEach's `use`).
enum class FetchUse { kDecode, kPrefill };

struct ExpertKey {
  int32_t layer = 0;   // decoder layer index (the MTP layer is num_hidden_layers)
  int32_t expert = 0;  // routed expert id, 0 .. n_routed_experts-1
  friend bool operator==(const ExpertKey&, const ExpertKey&) = default;
};

// Move-only RAII handle. `release` runs exactly once, when the lease is
// destroyed or reassigned (never for a moved-from or empty lease).
class ExpertLease {
 public:
  ExpertLease() = default;
  ExpertLease(const ExpertWeights* weights, std::function<void()> release)
      : weights_(weights), release_(std::move(release)) {}
  ExpertLease(ExpertLease&& o) noexcept
      : weights_(std::exchange(o.weights_, nullptr)), release_(std::exchange(o.release_, nullptr)) {}
  ExpertLease& operator=(ExpertLease&& o) noexcept {
    if (this != &o) {
      Reset();
      weights_ = std::exchange(o.weights_, nullptr);
      release_ = std::exchange(o.release_, nullptr);
    }
    return *this;
  }
  ExpertLease(const ExpertLease&) = delete;
  ExpertLease& operator=(const ExpertLease&) = delete;
  ~ExpertLease() { Reset(); }

  const ExpertWeights& weights() const { return *weights_; }
  const ExpertWeights* operator->() const { return weights_; }
  explicit operator bool() const { return weights_ != nullptr; }

  void Reset() {
    if (release_) release_();
    release_ = nullptr;
    weights_ = nullptr;
  }

 private:
  const ExpertWeights* weights_ = nullptr;
  std::function<void()> release_;
};

// Counters since construction (monotonic).
struct ExpertSourceStats {
  int64_t gets = 0;        // Get calls
  int64_t hits = 0;        // Gets served without loading
  int64_t misses = 0;      // Gets that loaded the expert
  int64_t evictions = 0;   // experts dropped to stay within the budget
  int64_t bytes_read = 0;  // bytes loaded from the backing store / network
  int64_t resident_bytes = 0;  // current bytes held (gauge)
  // Time Get / GetEach blocked: waiting for a non-resident expert to be read
  // (disk, or expertd's read and slab wait), and in the IPC around it
  // (shared-memory leases, the FetchExperts stream beyond expertd's own wait).
  double fetch_wait_seconds = 0;
  double ipc_seconds = 0;
  double HitRate() const { return gets == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(gets); }
};

class ExpertSource {
 public:
  using ExpertReady = std::function<absl::Status(size_t index, ExpertLease lease)>;

  virtual ~ExpertSource() = default;
  virtual absl::StatusOr<ExpertLease> Get(int layer, int expert) = 0;
  virtual absl::Status GetEach(int layer, std::span<const int> experts, const ExpertReady& ready, FetchUse use) {
    (void)use;
    for (size_t i = 0; i < experts.size(); ++i) {
      absl::StatusOr<ExpertLease> l = Get(layer, experts[i]);
      if (!l.ok()) return l.status();
      if (absl::Status s = ready(i, std::move(*l)); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  virtual void Hint(std::span<const ExpertKey> keys) { (void)keys; }
  virtual void HintAhead(std::span<const ExpertKey> keys) { (void)keys; }
  virtual ExpertSourceStats Stats() const = 0;
  // Whether Get can load experts now: OK, or Unavailable naming what is gone (a remote
  // source's daemon). Cheap; a remote source may try to reconnect here. Any thread.
  virtual absl::Status Health() { return absl::OkStatus(); }
};

}  // namespace moe
