// Shared-memory layout of expertd: the control region (header, table,
// slab descriptors, session lease rows) and the arena (slab bytes).
//
// Problem in numbers: GLM-5 has 75 MoE layers x 256 experts = 19,200
// records of ~19 MB; a 12 GiB budget holds ~650 slabs. The table is
// 19,200 x 8 B = 150 KiB, slab descriptors 128 B each, and each worker
// session owns one row of 4-byte lease counts per slab (64 sessions x 650
// slabs = 166 KiB). The arena itself is exactly the budget.
//
// Both regions are memfds created by expertd and passed to workers over a
// unix socket (SCM_RIGHTS). Workers map the control region read-write (they
// write their own lease row and hit counters) and the arena read-only.
//
// Lease protocol (lock-free, no RPC on a hit; see expert_table.h):
//   worker: e = table[key].slab_plus1; c1 = slab.ctl (READY, gen G);
//           key check; row[slab] += 1 (seq_cst); c2 = slab.ctl (seq_cst);
//           c2 == c1 ? leased : (row[slab] -= 1, miss)
//   expertd (single writer of ctl): ctl = (G+1, EVICTING) (seq_cst); if any
//           session row[slab] > 0 -> ctl = (G+2, READY) else free it.
// Dekker ordering (store then load, seq_cst on both sides) guarantees that a
// leased slab is never evicted or rewritten.
//
// Every struct has a magic/version (header) and static_asserts on its size
// and field offsets; bump kShmVersion on any change.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "common/format/slab_layout.h"

namespace moe::expertstore {

inline constexpr uint64_t kShmMagic = 0x31544d5345454f4dull;  // "MOEESMT1"
inline constexpr uint32_t kShmVersion = 2;  // 2: per-session hit log
inline constexpr int kMaxSizeClasses = kMaxSlabClasses;  // common/format/slab_layout.h
inline constexpr uint32_t kNoKey = 0xffffffffu;
using moe::kSlabAlign;

enum SlabState : uint32_t { kSlabFree = 0, kSlabFilling = 1, kSlabReady = 2, kSlabEvicting = 3, kSlabDisabled = 4 };

inline constexpr uint64_t CtlWord(uint64_t gen, uint32_t state) { return (gen << 8) | state; }
inline constexpr uint32_t CtlState(uint64_t ctl) { return static_cast<uint32_t>(ctl & 0xff); }
inline constexpr uint64_t CtlGen(uint64_t ctl) { return ctl >> 8; }
inline constexpr uint32_t PackKey(int layer, int expert) {
  return (static_cast<uint32_t>(layer) << 16) | static_cast<uint32_t>(expert);
}
inline constexpr int KeyLayer(uint32_t key) { return static_cast<int>(key >> 16); }
inline constexpr int KeyExpert(uint32_t key) { return static_cast<int>(key & 0xffff); }

struct ShmSizeClass {
  uint64_t slab_bytes;   // capacity of each slab (multiple of 4 KiB)
  uint32_t first_slab;   // index of its first slab descriptor
  uint32_t num_slabs;
};
static_assert(sizeof(ShmSizeClass) == 16);

struct alignas(64) ShmHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t header_bytes;
  uint32_t num_layers;
  uint32_t num_experts;
  uint32_t num_slabs;
  uint32_t max_sessions;
  uint32_t num_classes;
  uint32_t reserved0;
  uint64_t table_offset;     // from the start of the control region
  uint64_t slabs_offset;
  uint64_t sessions_offset;
  uint64_t session_stride;   // bytes per session row
  uint64_t control_bytes;
  uint64_t arena_bytes;
  ShmSizeClass classes[kMaxSizeClasses];
  char model_id[128];
  std::atomic<uint64_t> server_epoch;  // bumped on every expertd start
  std::atomic<uint32_t> active_slabs;  // budget (SetBudget) in slabs; informational
  uint32_t reserved1;
  uint8_t reserved[48];
};
static_assert(sizeof(ShmHeader) == 448);
static_assert(offsetof(ShmHeader, table_offset) == 40);
static_assert(offsetof(ShmHeader, classes) == 88);
static_assert(offsetof(ShmHeader, model_id) == 216);
static_assert(offsetof(ShmHeader, server_epoch) == 344);

// One per (layer, expert): which slab holds it (0 = none) and how often
// workers hit it in shared memory (harvested by expertd into heat).
struct ShmTableEntry {
  std::atomic<uint32_t> slab_plus1;
  std::atomic<uint32_t> hits;
};
static_assert(sizeof(ShmTableEntry) == 8);
static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free);

struct alignas(64) ShmSlab {
  std::atomic<uint64_t> ctl;  // gen << 8 | state; written only by expertd
  std::atomic<uint32_t> key;  // PackKey(layer, expert) or kNoKey
  uint32_t size_class;
  uint64_t arena_offset;      // from the start of the arena
  uint64_t capacity;
  uint64_t length;            // valid bytes (set before READY is published)
  uint32_t crc32c;
  uint32_t num_parts;
  uint64_t fill_ns;           // time the fill took (stats)
  uint64_t part_offsets[8];
};
static_assert(sizeof(ShmSlab) == 128);
static_assert(offsetof(ShmSlab, key) == 8);
static_assert(offsetof(ShmSlab, arena_offset) == 16);
static_assert(offsetof(ShmSlab, part_offsets) == 56);

enum SessionState : uint32_t { kSessionFree = 0, kSessionAttached = 1 };

// Entries in a session's hit log: the placement policy learns from the order
// of accesses, and hits taken in shared memory never reach expertd as RPCs.
// At GLM-5 speeds (600 accesses per token, a few tokens/s) 1,024 entries are
// ~0.5 s of hits; expertd drains the logs every ~20 ms.
inline constexpr uint32_t kHitLog = 1024;

// Header of one session row; followed by num_slabs std::atomic<uint32_t>
// lease counts (this session's leases per slab), then (64-byte aligned)
// kHitLog std::atomic<uint32_t> hit-log entries: PackKey + 1 of each lease
// taken in shared memory, in order (0 = not written yet). The worker claims
// entry hit_head++ % kHitLog and stores the key (release); expertd reads
// from its own tail up to hit_head, stops at an entry not written yet,
// zeroes what it read, and skips what the writer lapped (counted as lost).
struct alignas(64) ShmSessionHeader {
  std::atomic<uint32_t> state;
  uint32_t pid;
  std::atomic<uint64_t> token;       // random; proves ownership in RPCs
  std::atomic<uint64_t> shm_hits;    // leases taken without RPC
  std::atomic<uint64_t> shm_misses;  // lookups that had to go to RPC
  std::atomic<uint64_t> hit_head;    // hit-log entries ever claimed by this session
  uint8_t reserved[24];
};
static_assert(sizeof(ShmSessionHeader) == 64);
static_assert(offsetof(ShmSessionHeader, token) == 8);
static_assert(offsetof(ShmSessionHeader, hit_head) == 32);

}  // namespace moe::expertstore
