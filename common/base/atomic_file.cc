#include "common/base/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"

namespace moe {

namespace {

std::string DirOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

absl::Status FsyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open directory", dir);
  const int rc = ::fsync(fd);
  absl::Status s = rc == 0 ? absl::OkStatus() : ErrnoStatus("fsync directory", dir);
  ::close(fd);
  return s;
}

}  // namespace

absl::Status ErrnoStatus(std::string_view what, const std::string& path) {
  const int e = errno;
  const std::string msg = absl::StrCat(AV(what), " ", path, ": ", std::strerror(e));
  if (e == ENOSPC || e == EDQUOT) return absl::ResourceExhaustedError(msg + " (out of disk space)");
  if (e == ENOENT) return absl::NotFoundError(msg);
  return absl::UnavailableError(msg);
}

absl::StatusOr<AtomicFile> AtomicFile::Create(const std::string& path, TempName name) {
  static std::atomic<uint64_t> serial{0};
  std::string temp = name == TempName::kUnique ? absl::StrCat(path, ".tmp.", ::getpid(), ".", serial++) : path + ".tmp";
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("create", temp);
  return AtomicFile(path, std::move(temp), fd);
}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : path_(std::move(other.path_)),
      temp_(std::move(other.temp_)),
      fd_(std::exchange(other.fd_, -1)),
      committed_(std::exchange(other.committed_, true)) {}

AtomicFile& AtomicFile::operator=(AtomicFile&& other) noexcept {
  if (this != &other) {
    Abandon();
    path_ = std::move(other.path_);
    temp_ = std::move(other.temp_);
    fd_ = std::exchange(other.fd_, -1);
    committed_ = std::exchange(other.committed_, true);
  }
  return *this;
}

AtomicFile::~AtomicFile() { Abandon(); }

void AtomicFile::Abandon() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
  committed_ = true;
}

absl::Status AtomicFile::PWrite(const void* data, uint64_t n, uint64_t offset) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(temp_, ": write after commit"));
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd_, p, std::min<uint64_t>(n, uint64_t{1} << 30), static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("write", temp_);
    }
    p += w;
    n -= static_cast<uint64_t>(w);
    offset += static_cast<uint64_t>(w);
  }
  return absl::OkStatus();
}

absl::Status AtomicFile::Append(std::string_view bytes) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(temp_, ": write after commit"));
  const char* p = bytes.data();
  size_t n = bytes.size();
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("write", temp_);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::Status AtomicFile::Commit() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": already committed"));
  if (::fsync(fd_) != 0) {
    absl::Status s = ErrnoStatus("fsync", temp_);
    Abandon();
    return s;
  }
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) {
    absl::Status s = ErrnoStatus("close", temp_);
    Abandon();
    return s;
  }
  if (::rename(temp_.c_str(), path_.c_str()) != 0) {
    absl::Status s = ErrnoStatus(absl::StrCat("rename ", temp_, " to"), path_);
    Abandon();
    return s;
  }
  committed_ = true;
  return FsyncDirectory(DirOf(path_));
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view bytes, TempName temp) {
  MOE_ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::Create(path, temp));
  MOE_RETURN_IF_ERROR(f.Append(bytes));
  return f.Commit();
}

}  // namespace moe
