// Whether a byte range of a file is in the OS page cache, asked without side effects: mincore(2) over
// a read-only mapping of the file (address space only; nothing is faulted in or read).
//
// Why not simply try preadv2(RWF_NOWAIT) and fall back on a short read: on a miss the kernel still
// starts readahead of the requested range (filemap_get_pages: only IOCB_NOIO, which user space cannot
// set, skips it). A 21 MB expert record tried that way is read twice, once into the page cache (which a
// memory cgroup charges, evicting the workers' mapped weights) and once more by the O_DIRECT read.
//
// Where the kernel does not let this process see the file's cache state (mincore on a file the caller
// neither owns nor may write reports only its own mapped pages), every range reads as not cached: the
// page-cache tier then never serves, which is safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

namespace moe {

class PageCacheProbe {
 public:
  // Maps fd (opened for reading) read-only over its current size.
  static absl::StatusOr<std::unique_ptr<PageCacheProbe>> Open(int fd);
  ~PageCacheProbe();
  PageCacheProbe(const PageCacheProbe&) = delete;
  PageCacheProbe& operator=(const PageCacheProbe&) = delete;

  // True when every page of [offset, offset + length) is cached. Thread-safe.
  bool Cached(uint64_t offset, uint64_t length) const;

 private:
  PageCacheProbe(void* addr, uint64_t size) : addr_(addr), size_(size) {}
  void* addr_;
  uint64_t size_;
};

}  // namespace moe
