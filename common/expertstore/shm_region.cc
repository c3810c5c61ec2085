#include "common/expertstore/shm_region.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include <utility>

#include "absl/strings/str_cat.h"

namespace moe::expertstore {

ShmRegion::~ShmRegion() {
  if (data_ != nullptr) ::munmap(data_, size_);
  if (fd_ >= 0) ::close(fd_);
}

ShmRegion::ShmRegion(ShmRegion&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), fd_(std::exchange(o.fd_, -1)) {}

ShmRegion& ShmRegion::operator=(ShmRegion&& o) noexcept {
  if (this != &o) {
    this->~ShmRegion();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

namespace {
// Free pages of the 2 MiB hugetlb pool (-1 if unknown).
int64_t FreeHugePages() {
  FILE* f = std::fopen("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages", "r");
  if (!f) return -1;
  long long n = -1;
  if (std::fscanf(f, "%lld", &n) != 1) n = -1;
  std::fclose(f);
  return n;
}
}  // namespace

absl::StatusOr<ShmRegion> ShmRegion::Create(const std::string& name, uint64_t bytes, bool populate, bool huge_pages) {
  if (bytes == 0) return absl::InvalidArgumentError(absl::StrCat("shm ", name, ": zero size"));
  if (huge_pages) bytes = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  int fd = ::memfd_create(name.c_str(), MFD_CLOEXEC | (huge_pages ? MFD_HUGETLB : 0));
  if (fd < 0)
    return absl::UnavailableError(absl::StrCat("memfd_create(", name, huge_pages ? ", MFD_HUGETLB" : "", "): ",
                                               strerror(errno)));
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int e = errno;
    ::close(fd);
    return absl::ResourceExhaustedError(absl::StrCat("shm ", name, ": ftruncate to ", bytes, " bytes: ", strerror(e)));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    ::close(fd);
    if (huge_pages)
      return absl::ResourceExhaustedError(absl::StrCat(
          "shm ", name, ": ", bytes / kHugePage, " huge pages of 2 MiB needed, ", FreeHugePages(),
          " free in the pool (root: echo N > /proc/sys/vm/nr_hugepages; or run without huge pages): ", strerror(e)));
    return absl::ResourceExhaustedError(absl::StrCat("shm ", name, ": mmap ", bytes, " bytes: ", strerror(e)));
  }
  if (!huge_pages) ::madvise(p, bytes, MADV_HUGEPAGE);  // best effort (shmem THP)
  ShmRegion r;
  r.data_ = static_cast<uint8_t*>(p);
  r.size_ = bytes;
  r.fd_ = fd;
  return r;
}

absl::StatusOr<ShmRegion> ShmRegion::Map(int fd, uint64_t bytes, bool writable) {
  struct stat st;
  if (::fstat(fd, &st) != 0 || uint64_t(st.st_size) < bytes) {
    ::close(fd);
    return absl::DataLossError(absl::StrCat("shm fd smaller than ", bytes, " bytes"));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("mmap of received shm fd: ", strerror(e)));
  }
  ShmRegion r;
  r.data_ = static_cast<uint8_t*>(p);
  r.size_ = bytes;
  r.fd_ = fd;
  return r;
}

}  // namespace moe::expertstore
