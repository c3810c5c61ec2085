// ExpertStore: expertd's cache engine. Owns the shared-memory arena and
// table, the io engine, the placement policy and the sessions' leases.
//
// Problem in numbers: GLM-5 reads 600 experts of ~19 MB per token; at
// 2.3 GB/s a miss costs ~8 ms, a RAM hit ~0.5 ms of matvec. The store turns
// misses into hits (HeatPolicy placement, prefetch from hints), overlaps
// the rest (io_uring at queue depth), and keeps hits RPC-free (ExpertTable
// leases in shared memory).
//
// Budget: the arena is sized once from `budget_bytes` into slabs in size
// classes (records within 25% of a class's largest share it); each class
// gets its share of the budget in proportion to its records' bytes, and at
// least `top_k` slabs — a budget that cannot hold one layer's top-k of every
// class is refused at Create with the numbers. SetBudget can lower the
// active slab count later (or raise it back up to the arena).
//
// Guarantees: a slab leased by any session is never evicted or rewritten;
// a failed read (I/O error, short read, checksum mismatch) fails only the
// requests waiting for that record, with the cause; a speculative fill
// never evicts a key hotter than what it brings.
//
// Thread safety: all public methods are thread-safe (one mutex; reads and
// checksums run outside it on io threads).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/expertstore/expert_table.h"
#include "common/expertstore/io_engine.h"
#include "common/expertstore/page_cache_probe.h"
#include "common/expertstore/policy.h"
#include "common/expertstore/prefetch_gate.h"
#include "common/expertstore/record_locator.h"
#include "common/expertstore/shm_region.h"
#include "common/expertstore/tier.h"

namespace moe::expertstore {

struct StoreConfig {
  uint64_t budget_bytes = 0;
  uint32_t max_sessions = 16;
  uint32_t top_k = 8;             // experts per layer per token (budget floor)
  IoConfig io;
  bool page_cache_tier = true;    // serve records the OS already caches without disk reads
  bool populate = false;          // pre-fault the arena at start
  bool huge_pages = false;        // arena on 2 MiB hugetlb pages (shm_region.h; the pool must hold it)
  PolicyConfig policy{0};  // accesses_per_token 0 = MoE layers x top_k
  std::string heat_file;          // load at start (if present), save on SaveHeat/destruction
  int64_t wait_ms = 10000;        // how long a fetch waits for a free slab
  uint32_t max_prefetch_inflight = 0;  // 0 = 2 x queue depth
  PrefetchGateConfig prefetch_gate;    // when look-ahead hints are worth reading (prefetch_gate.h)
};

struct TierStats {
  uint64_t hits = 0;        // requests served from this tier
  uint64_t bytes = 0;       // bytes delivered from this tier
};

struct StoreStats {
  TierStats tier[kNumTiers];
  uint64_t requests = 0;        // experts requested through Fetch
  uint64_t joined_inflight = 0; // requests that found the record already being read
  uint64_t shm_hits = 0;        // leases taken by workers without an RPC
  uint64_t evictions = 0;
  uint64_t read_errors = 0;
  uint64_t prefetch_issued = 0;
  uint64_t prefetch_used = 0;       // prefetched records later requested
  uint64_t prefetch_refused = 0;    // admission said no (victims hotter)
  uint64_t prefetch_promoted = 0;   // look-ahead fills a fetch joined in flight (queued reads became demand)
  uint64_t prefetch_gated = 0;      // look-ahead misses not read: the prefetch gate was closed
  uint64_t lookahead_kept = 0;      // look-ahead hints for resident experts (kept until their layer runs)
  bool prefetch_gate_open = true;   // the gate's decision now
  double prefetch_precision = 0;    // the gate's decayed look-ahead precision p
  double demand_busy = 0;           // the gate's decayed share of time fetches waited, u
  uint64_t hit_log_lost = 0;        // shm hits the policy never saw (a session's hit log lapped)
  // Prefill fetches (FetchUse::kPrefill): experts they asked for, misses they
  // filled, and the fills that had to evict a key of the decode set (not a
  // free slab, not a slab a prefill filled, not a key colder than the one it
  // brings): at most top_k slabs of a class are held that way at once.
  uint64_t prefill_requests = 0;
  uint64_t prefill_fills = 0;
  uint64_t prefill_decode_evictions = 0;
  // Placement policy (policy.h): the order in use, and the learned model.
  std::string policy;                    // "learned" or "heat"
  std::vector<double> policy_weights;    // learned order: the logistic model's weights
  double policy_horizon_tokens = 0;      // learned order: what "used soon" means now (mean eviction age)
  uint64_t slabs_total = 0, slabs_active = 0, slabs_ready = 0, slabs_filling = 0, slabs_leased = 0;
  // Keys in the policy's eviction order (HeatPolicy::EvictFirst): always
  // slabs_ready + slabs_filling (every fill, eviction, failed read and
  // disabled slab is reported to it).
  uint64_t policy_resident = 0;
  uint64_t arena_bytes = 0, budget_bytes = 0, resident_bytes = 0;
  uint32_t sessions = 0;
  std::string io_engine;
  int queue_depth = 0;
  uint64_t io_inflight = 0;
  double read_gbps = 0;         // disk bytes / time with reads in flight
};

struct HeatEntry {
  int layer, expert;
  double heat;
  bool resident, filling, pinned;
  uint32_t leases;
};

class ExpertStore {
 public:
  static absl::StatusOr<std::unique_ptr<ExpertStore>> Create(std::unique_ptr<RecordLocator> locator,
                                                             const StoreConfig& config);
  ~ExpertStore();

  const RecordLocator& locator() const { return *locator_; }
  ExpertTable& table() { return table_; }
  const ShmRegion& control_region() const { return ctl_; }
  const ShmRegion& arena_region() const { return arena_; }

  struct Session {
    uint32_t index;
    uint64_t token;
  };
  absl::StatusOr<Session> OpenSession(uint32_t pid);
  absl::Status CheckSession(uint32_t index, uint64_t token) const;
  // Drops all leases of the session (dead or detached worker).
  void CloseSession(uint32_t index);

  // Makes (layer, ids) resident and leases each for the session. One
  // result per id: the leased slab or the error for that id (InvalidArgument
  // for a bad id, DataLoss for a bad record, ResourceExhausted when no slab
  // frees up in time).
  //
  // FetchEach reports the results as they come (pipelining: a worker
  // computes an expert while the layer's other reads are still in flight):
  // `ready` gets (index into ids, result) pairs, every index exactly once,
  // resident ids first (after every miss's read was started), then each
  // miss as soon as its read is published; ids finishing together come in
  // one call. It is called without the store's lock, on the calling
  // thread; FetchEach returns once every id was reported. Fetch is FetchEach
  // collected into request order (blocks until every read finished).
  //
  // `use` (FetchRequest.prefill): kPrefill marks a prefill pass's experts,
  // read once per prompt chunk and not the decode working set. They are
  // streamed without polluting it: they do not count as accesses (no heat,
  // no clock: a 128-token chunk asks for nearly every expert of a layer,
  // which would otherwise age and out-heat the decode set within one
  // chunk), and a miss fills, in order, a free slab, a slab an earlier
  // prefill filled (unleased), a slab whose key is colder than the incoming
  // one is (admission as for speculative fills, with a prediction that the
  // decode steps will use it of precision 0: a prompt's expert is worth only
  // what decoding made it so far, not the recency bonus of a use now), and
  // only while fewer than top_k slabs of its class hold prefill fills, the
  // coldest slab; else it waits for a prefill slab to be released (a
  // pipelined worker releases each expert once computed). A decode fetch of
  // a key a prefill filled makes it an ordinary slab.
  enum class FetchUse { kDecode, kPrefill };
  using FetchReady = std::function<void(std::span<const std::pair<size_t, absl::StatusOr<uint32_t>>>)>;
  void FetchEach(uint32_t session, int layer, const std::vector<int>& ids, const FetchReady& ready,
                 FetchUse use = FetchUse::kDecode);
  std::vector<absl::StatusOr<uint32_t>> Fetch(uint32_t session, int layer, const std::vector<int>& ids,
                                              FetchUse use = FetchUse::kDecode);
  // Drops a lease Fetch granted that never reached the worker (its stream
  // broke); nothing if the session was reclaimed since (its rows are zero).
  void ReleaseUndelivered(uint32_t session, uint64_t token, uint32_t slab);
  // Starts reads for likely misses (never blocks on I/O). Returns how many
  // reads it started. Two kinds:
  //  * look-ahead (default): a prediction (the next layer's router applied
  //    to this layer's state, ~72% right): speculative, lower priority. It
  //    only evicts a key colder than what it brings (admission; refused hints
  //    count in prefetch_refused) and at most max_prefetch_inflight of them
  //    are in flight. Its reads go to the disk only in spare capacity
  //    (IoConfig::max_speculative_inflight); a Fetch that joins one in flight
  //    promotes its queued reads to demand priority (prefetch_promoted). The
  //    prefetch gate (prefetch_gate.h) skips look-ahead hints that would
  //    evict (no free slab) while fetches wait for the disk more often than
  //    predictions come true (prefetch_gated counts the misses not read).
  //  * current (`lookahead` false): the routing the worker computed and is
  //    about to fetch: certain, so it is filled like a demand miss (evicts
  //    the coldest unleased slab, not capped), only without a lease.
  // Both kinds keep every named expert (resident or filled here) until its
  // layer's next visit begins (HeatPolicy::Expect), marked before any of
  // the hint's fills picks a victim.
  int Hint(int layer, const std::vector<int>& ids, bool lookahead = true);

  absl::Status Pin(int layer, int expert, bool pinned);
  // Changes the number of active slabs (<= the arena); returns the new
  // active budget in bytes.
  absl::StatusOr<uint64_t> SetBudget(uint64_t bytes);

  StoreStats Stats();
  std::vector<HeatEntry> Heat();
  absl::Status SaveHeat();
  // Periodic work: harvest worker hit counters into heat, finish pending
  // budget shrinks. Called by the service about every 100 ms.
  void Maintain();

 private:
  struct SlabPriv {
    uint32_t claims = 0;          // fetches waiting to lease this slab
    bool prefetched = false;      // filled by a hint, not yet requested
    bool prefetch_fill = false;   // a hint's read is in flight
    bool lookahead_fill = false;  // ... and it is a look-ahead (speculative) read
    bool lookahead_unresolved = false;  // a look-ahead fill no fetch used yet (gate precision)
    int lookahead_layer = -1, lookahead_expert = -1;  // its key
    bool to_disable = false;
    bool prefill = false;  // filled by a prefill fetch, no decode fetch used it since
    TierId source = TierId::kDisk;
    std::shared_ptr<struct FillState> fill;
  };
  struct StartRead {
    uint32_t slab;
    RecordLocation loc;
    std::shared_ptr<struct FillState> fill;
    bool speculative = false;  // a look-ahead prefetch: its reads yield to demand reads
  };
  // A slab from AllocateLocked is reused: a look-ahead fill it held goes unused.
  void ResolveReusedLocked(uint32_t slab);
  void DemandWaitLocked(bool begin);
  // A free (active, empty) slab in class `cls`: a fill there evicts nothing.
  bool HasFreeSlabLocked(uint32_t cls) const;
  // Workers hit (layer, expert) in shared memory: a prefetch of it was used.
  void NoteShmUseLocked(int layer, int expert);
  // The hinted fill in `slab` was used (a fetch or a shm lease took it):
  // counts prefetch_used and a true prediction for the gate, once each.
  void NoteHintUsedLocked(uint32_t slab);

  ExpertStore() = default;
  uint32_t ClassOf(uint64_t length) const;
  // Finds a slab for key in `cls`: a free one, else evicts the coldest
  // eligible one (speculative: only if colder than key). -1 if none.
  // `precision` >= 0 overrides how likely the speculative fill is to be
  // used (HeatPolicy::Admits; default: certain, or the gate's precision).
  int64_t AllocateLocked(uint32_t cls, uint32_t key, bool speculative, double precision = -1);
  // A prefill miss's slab (the order in FetchEach's comment). -1: wait.
  int64_t AllocatePrefillLocked(uint32_t cls, uint32_t key);
  // Hands the policy one random resident key to learn from (see HeatPolicy).
  void ObserveRandomResidentLocked();
  // Feeds the policy a session's shm hits in order (its hit log, shm_layout.h).
  void DrainHitLogLocked(uint32_t session);
  void StartReads(std::vector<StartRead> reads);
  void OnReadDone(uint32_t slab, const RecordLocation& loc, std::shared_ptr<FillState> fill, absl::Status s,
                  TierId tier, std::chrono::steady_clock::time_point t0);
  void HarvestLocked();
  void ApplyDisableLocked();

  std::unique_ptr<RecordLocator> locator_;
  StoreConfig cfg_;
  ShmRegion ctl_, arena_;
  ExpertTable table_;
  std::unique_ptr<IoEngine> io_;
  std::vector<int> direct_fds_, buffered_fds_;
  std::vector<std::unique_ptr<PageCacheProbe>> cache_probes_;  // per file; null: page-cache tier off there
  std::vector<std::string> files_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  HeatPolicy policy_{1, 1};
  std::vector<SlabPriv> priv_;
  std::vector<uint64_t> class_bytes_;  // slab bytes per class
  StoreStats stats_;
  uint32_t prefetch_inflight_ = 0;
  PrefetchGate gate_;
  uint32_t fetches_waiting_ = 0;  // Fetch calls now waiting for a read or a slab
  uint64_t next_fill_tag_ = 0;    // ReadOp::tag of fills (for IoEngine::Promote)
  uint64_t observe_rng_ = 0x9e3779b97f4a7c15ull;
  std::vector<uint64_t> hit_tail_;  // per session: hit-log entries read
  std::chrono::steady_clock::time_point last_harvest_{};
};

}  // namespace moe::expertstore
