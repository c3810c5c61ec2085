#include "common/expertstore/page_cache_probe.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace moe {

absl::StatusOr<std::unique_ptr<PageCacheProbe>> PageCacheProbe::Open(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return absl::InternalError(absl::StrCat("fstat: ", std::strerror(errno)));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size == 0) return std::unique_ptr<PageCacheProbe>(new PageCacheProbe(nullptr, 0));
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (addr == MAP_FAILED) return absl::InternalError(absl::StrCat("mmap: ", std::strerror(errno)));
  return std::unique_ptr<PageCacheProbe>(new PageCacheProbe(addr, size));
}

PageCacheProbe::~PageCacheProbe() {
  if (addr_ != nullptr) ::munmap(addr_, size_);
}

bool PageCacheProbe::Cached(uint64_t offset, uint64_t length) const {
  if (length == 0) return true;
  if (offset >= size_ || length > size_ - offset) return false;
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t begin = offset / page * page;
  const uint64_t end = offset + length;
  const uint64_t pages = (end - begin + page - 1) / page;
  std::vector<unsigned char> vec(pages);
  if (::mincore(static_cast<char*>(addr_) + begin, end - begin, vec.data()) != 0) return false;
  for (unsigned char v : vec) {
    if ((v & 1) == 0) return false;
  }
  return true;
}

}  // namespace moe
