// ShmRegion: one memfd-backed shared mapping (create, or map a received fd).
//
// expertd creates two: the control region (read-write for everyone) and the
// arena (read-write for expertd, read-only for workers). Sizes are fixed at
// creation; nothing grows afterwards (invariant 2: no OOM by construction).
// The arena is madvise(MADV_HUGEPAGE)d where the kernel allows.
//
// Thread safety: immutable after construction; movable, not copyable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace moe::expertstore {

class ShmRegion {
 public:
  ShmRegion() = default;
  ~ShmRegion();
  ShmRegion(ShmRegion&& o) noexcept;
  ShmRegion& operator=(ShmRegion&& o) noexcept;
  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;

  // memfd_create + ftruncate + mmap(MAP_SHARED, RW). `populate` pre-faults
  // the pages so the budget is committed at start.
  static absl::StatusOr<ShmRegion> Create(const std::string& name, uint64_t bytes, bool populate);
  // Maps a received fd (takes ownership). Fails if the fd is smaller than bytes.
  static absl::StatusOr<ShmRegion> Map(int fd, uint64_t bytes, bool writable);

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  int fd() const { return fd_; }

 private:
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  int fd_ = -1;
};

}  // namespace moe::expertstore
