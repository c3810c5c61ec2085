#include "common/expertstore/fd_passing.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace moe::expertstore {
namespace {
absl::StatusOr<sockaddr_un> Addr(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof(a.sun_path))
    return absl::InvalidArgumentError(absl::StrCat("unix socket path too long (", path.size(), " > ",
                                                    sizeof(a.sun_path) - 1, "): ", path));
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  return a;
}
}  // namespace

absl::StatusOr<int> ListenUnix(const std::string& path) {
  auto a = Addr(path);
  if (!a.ok()) return a.status();
  int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return absl::UnavailableError(absl::StrCat("socket: ", strerror(errno)));
  ::unlink(path.c_str());
  if (::bind(s, reinterpret_cast<sockaddr*>(&*a), sizeof(*a)) != 0 || ::listen(s, 64) != 0) {
    int e = errno;
    ::close(s);
    return absl::UnavailableError(absl::StrCat("bind/listen ", path, ": ", strerror(e)));
  }
  return s;
}

absl::StatusOr<int> ConnectUnix(const std::string& path) {
  auto a = Addr(path);
  if (!a.ok()) return a.status();
  int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return absl::UnavailableError(absl::StrCat("socket: ", strerror(errno)));
  if (::connect(s, reinterpret_cast<sockaddr*>(&*a), sizeof(*a)) != 0) {
    int e = errno;
    ::close(s);
    return absl::UnavailableError(absl::StrCat("connect ", path, ": ", strerror(e)));
  }
  return s;
}

absl::Status SendWithFds(int sock, const void* data, size_t len, const std::vector<int>& fds) {
  iovec iov{const_cast<void*>(data), len};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  std::vector<char> ctrl(CMSG_SPACE(sizeof(int) * fds.size()));
  if (!fds.empty()) {
    m.msg_control = ctrl.data();
    m.msg_controllen = ctrl.size();
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t n;
  do {
    n = ::sendmsg(sock, &m, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n != ssize_t(len)) return absl::UnavailableError(absl::StrCat("sendmsg: ", n < 0 ? strerror(errno) : "short"));
  return absl::OkStatus();
}

absl::Status RecvWithFds(int sock, void* data, size_t len, std::vector<int>* fds, int max_fds) {
  iovec iov{data, len};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  std::vector<char> ctrl(CMSG_SPACE(sizeof(int) * max_fds));
  m.msg_control = ctrl.data();
  m.msg_controllen = ctrl.size();
  ssize_t n;
  do {
    n = ::recvmsg(sock, &m, MSG_CMSG_CLOEXEC | MSG_WAITALL);
  } while (n < 0 && errno == EINTR);
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < k; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds->push_back(fd);
      }
    }
  }
  if (n != ssize_t(len))
    return absl::UnavailableError(absl::StrCat("recvmsg: ", n < 0 ? strerror(errno) : "connection closed"));
  return absl::OkStatus();
}

absl::Status ReadFull(int fd, void* data, size_t len) {
  auto* p = static_cast<uint8_t*>(data);
  while (len) {
    ssize_t n = ::read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::UnavailableError(n < 0 ? strerror(errno) : "connection closed");
    p += n;
    len -= size_t(n);
  }
  return absl::OkStatus();
}

}  // namespace moe::expertstore
