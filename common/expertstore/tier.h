// Tiers of the expert store.
//
//   VRAM (CUDA, optional) <- RAM arena (shared memory slabs) <- page cache <- disk
//
// Source tiers deliver record bytes: the page cache (a buffered
// preadv2(RWF_NOWAIT) that succeeds only when the OS already holds every
// page; enabled with StoreConfig::page_cache_tier) and the disk (O_DIRECT
// through the IoEngine). Resident tiers hold verified copies in slots that
// workers map: the RAM arena (ExpertTable slabs, one memfd for all slots)
// and, when built with MOE_CUDA, device memory exported with CUDA IPC
// handles (cuda_vram_tier.h). A resident tier is filled from the tier below
// it after the checksum passed, so a worker only ever sees verified bytes.
//
// Thread safety: implementations document their own; the store serializes
// Fill calls per slot.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace moe::expertstore {

enum class TierId : int { kVram = 0, kRam = 1, kPageCache = 2, kDisk = 3 };
inline constexpr int kNumTiers = 4;
inline const char* TierName(TierId t) {
  switch (t) {
    case TierId::kVram: return "vram";
    case TierId::kRam: return "ram";
    case TierId::kPageCache: return "pagecache";
    case TierId::kDisk: return "disk";
  }
  return "?";
}

class ResidentTier {
 public:
  virtual ~ResidentTier() = default;
  virtual TierId id() const = 0;
  virtual uint32_t num_slots() const = 0;
  virtual uint64_t slot_bytes(uint32_t slot) const = 0;
  virtual uint64_t capacity_bytes() const = 0;
  // Copies `len` verified bytes from host memory into `slot`.
  virtual absl::Status Fill(uint32_t slot, const uint8_t* src, uint64_t len) = 0;
  // Opaque bytes another process needs to map `slot` (a CUDA IPC handle;
  // the RAM tier returns the slot's arena offset, the arena fd is shared once).
  virtual absl::StatusOr<std::string> ExportSlot(uint32_t slot) const = 0;
};

}  // namespace moe::expertstore
