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
  // the pages so the budget is committed at start. `huge_pages`: backed by
  // hugetlb pages of the default size, 2 MiB here (MFD_HUGETLB; the size
  // rounds up to 2 MiB), taken
  // from the pool root reserves in /proc/sys/vm/nr_hugepages; a pool too
  // small is ResourceExhausted naming the pages needed and free. (Without it
  // the region is MADV_HUGEPAGE'd, which takes effect only where shmem THP
  // is enabled: /sys/kernel/mm/transparent_hugepage/shmem_enabled.)
  static absl::StatusOr<ShmRegion> Create(const std::string& name, uint64_t bytes, bool populate,
                                          bool huge_pages = false);
  static constexpr uint64_t kHugePage = 2ull << 20;
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
