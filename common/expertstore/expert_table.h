// ExpertTable: typed view over expertd's shared-memory control region and
// arena (layout in shm_layout.h). Used by expertd (server side: format,
// fill, publish, evict, reclaim) and by workers (client side: lease and
// release without an RPC).
//
// Costs: a worker lease is two loads, one seq_cst fetch_add, one seq_cst
// load, one relaxed hit-counter add and one hit-log append (~50-100 ns
// uncontended); release is
// one fetch_sub. Eviction scans max_sessions lease counts for one slab.
//
// Thread safety: TryLease/Release are lock-free and safe from any thread of
// any process. The server-side mutators (BeginFill, Publish, Abort, TryEvict,
// LeaseForSession, ReclaimSession, ...) must be serialized by the caller
// (expertd holds one mutex); they are the only writers of ctl/key/table.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/expertstore/shm_layout.h"

namespace moe::expertstore {

struct SizeClassSpec {
  uint64_t slab_bytes = 0;  // rounded up to 4 KiB by ComputeGeometry
  uint32_t num_slabs = 0;
};

struct ShmGeometry {
  uint32_t num_layers = 0;
  uint32_t num_experts = 0;
  uint32_t max_sessions = 16;
  std::vector<SizeClassSpec> classes;
  std::string model_id;

  uint32_t num_slabs() const;
  uint64_t arena_bytes() const;    // sum of slab bytes (the budget actually used)
  uint64_t control_bytes() const;  // header + table + slabs + session rows
};

// A lease on one slab: the bytes stay valid and unchanged until Release.
struct Lease {
  uint32_t slab = 0;
  uint64_t gen = 0;
  int layer = 0;
  int expert = 0;
  const uint8_t* data = nullptr;
  uint64_t length = 0;
  uint32_t num_parts = 0;
  uint64_t part_offsets[8] = {};
  uint64_t epoch = 0;  // client-side: which expertd connection granted it (not in shm)
};

class ExpertTable {
 public:
  ExpertTable() = default;
  // Server: initialise `ctl` (control_bytes() zero-filled bytes) for `g`.
  static absl::StatusOr<ExpertTable> Format(void* ctl, uint64_t ctl_bytes, uint8_t* arena, uint64_t arena_bytes,
                                            const ShmGeometry& g);
  // Client: validate magic/version/sizes of mapped regions.
  static absl::StatusOr<ExpertTable> Attach(void* ctl, uint64_t ctl_bytes, const uint8_t* arena,
                                            uint64_t arena_bytes);

  const ShmHeader& header() const { return *hdr_; }
  uint32_t num_layers() const { return hdr_->num_layers; }
  uint32_t num_experts() const { return hdr_->num_experts; }
  uint32_t num_slabs() const { return hdr_->num_slabs; }
  uint32_t max_sessions() const { return hdr_->max_sessions; }
  bool ValidKey(int layer, int expert) const {
    return layer >= 0 && expert >= 0 && uint32_t(layer) < hdr_->num_layers && uint32_t(expert) < hdr_->num_experts;
  }

  // ---- worker fast path (any process) ----
  // Leases (layer, expert) for `session` if it is READY; nullopt on a miss.
  std::optional<Lease> TryLease(uint32_t session, int layer, int expert);
  void Release(uint32_t session, uint32_t slab);
  // Fills `out` for a slab that the caller holds a lease on.
  void Describe(uint32_t slab, Lease* out) const;

  // ---- server side (caller serializes) ----
  ShmSlab& slab(uint32_t i) { return slabs_[i]; }
  const ShmSlab& slab(uint32_t i) const { return slabs_[i]; }
  ShmTableEntry& entry(int layer, int expert) { return table_[size_t(layer) * hdr_->num_experts + expert]; }
  uint8_t* slab_data(uint32_t i) const { return arena_ + slabs_[i].arena_offset; }
  ShmSessionHeader& session(uint32_t s) const;
  std::atomic<uint32_t>* session_counts(uint32_t s) const;
  std::atomic<uint32_t>* session_hit_log(uint32_t s) const;
  // Hands fn(layer, expert) every hit the session logged since *tail, in
  // order (stops at an entry claimed but not yet written), advancing *tail;
  // returns how many the writer lapped before they were read (lost).
  uint64_t DrainHitLog(uint32_t session, uint64_t* tail, const std::function<void(int, int)>& fn) const;
  // Total leases on a slab over all sessions.
  uint64_t LeaseCount(uint32_t slab) const;
  // FREE slab -> FILLING for key (table entry points at it).
  void BeginFill(uint32_t slab, int layer, int expert);
  // FILLING -> READY with the record's length/crc/parts.
  void Publish(uint32_t slab, uint64_t length, uint32_t crc, uint32_t num_parts, const uint64_t* parts,
               uint64_t fill_ns);
  // FILLING -> FREE (failed fill), table entry cleared.
  void Abort(uint32_t slab);
  // READY and unleased -> FREE. False (slab unchanged but gen bumped) if leased.
  bool TryEvict(uint32_t slab);
  // FREE <-> DISABLED (budget changes).
  void SetDisabled(uint32_t slab, bool disabled);
  // Server-side lease on behalf of a session (slab must be READY).
  void LeaseForSession(uint32_t session, uint32_t slab);
  // Drops every lease of a session and frees its row.
  void ReclaimSession(uint32_t session);

 private:
  ShmHeader* hdr_ = nullptr;
  ShmTableEntry* table_ = nullptr;
  ShmSlab* slabs_ = nullptr;
  uint8_t* sessions_ = nullptr;
  uint8_t* arena_ = nullptr;
};

}  // namespace moe::expertstore
