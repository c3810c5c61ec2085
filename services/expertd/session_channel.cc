#include "services/expertd/session_channel.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

#include "common/base/log.h"
#include "common/base/status.h"
#include "common/expertstore/fd_passing.h"

namespace moe::expertd {

using namespace expertstore;

namespace {
constexpr auto kConnectTimeout = std::chrono::seconds(10);
}

absl::Status SessionChannel::Start() {
  MOE_ASSIGN_OR_RETURN(listen_fd_, ListenUnix(path_));
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void SessionChannel::Stop() {
  if (!thread_.joinable()) return;
  stop_ = true;
  uint64_t one = 1;
  ssize_t r = ::write(wake_fd_, &one, 8);
  (void)r;
  thread_.join();
  for (auto& [fd, c] : conns_) ::close(fd);
  conns_.clear();
  ::close(listen_fd_);
  ::close(wake_fd_);
  ::unlink(path_.c_str());
}

void SessionChannel::Expect(uint32_t session, uint64_t token) {
  std::lock_guard<std::mutex> l(mu_);
  pending_[session] = Pending{token, std::chrono::steady_clock::now() + kConnectTimeout};
}

void SessionChannel::Accept() {
  int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return;
  // The hello is 24 bytes sent right after connect; a short timeout keeps a
  // misbehaving client from stalling the loop.
  timeval tv{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  SessionHello hello{};
  SessionWelcome w{kSessionWelcomeMagic, kSessionWireVersion, 0, 0, 0, 0};
  if (!ReadFull(fd, &hello, sizeof hello).ok() || hello.magic != kSessionHelloMagic ||
      hello.version != kSessionWireVersion) {
    ::close(fd);
    return;
  }
  bool ok = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = pending_.find(hello.session);
    if (it != pending_.end() && it->second.token == hello.token &&
        store_->CheckSession(hello.session, hello.token).ok()) {
      pending_.erase(it);
      ok = true;
    }
  }
  if (!ok) {
    w.status = static_cast<int32_t>(absl::StatusCode::kPermissionDenied);
    (void)SendWithFds(fd, &w, sizeof w, {});
    ::close(fd);
    return;
  }
  w.control_bytes = store_->control_region().size();
  w.arena_bytes = store_->arena_region().size();
  if (!SendWithFds(fd, &w, sizeof w, {store_->control_region().fd(), store_->arena_region().fd()}).ok()) {
    ::close(fd);
    store_->CloseSession(hello.session);
    return;
  }
  conns_[fd] = Conn{hello.session, hello.token};
  MOE_LOG(INFO) << "session " << hello.session << " connected";
}

void SessionChannel::Drop(int fd) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  // Only reclaim if the session was not detached and re-used meanwhile.
  if (store_->CheckSession(it->second.session, it->second.token).ok()) {
    MOE_LOG(INFO) << "session " << it->second.session << ": worker gone; releasing its leases";
    store_->CloseSession(it->second.session);
  }
  ::close(fd);
  conns_.erase(it);
}

void SessionChannel::Loop() {
  while (!stop_) {
    std::vector<pollfd> pfds;
    pfds.push_back({listen_fd_, POLLIN, 0});
    pfds.push_back({wake_fd_, POLLIN, 0});
    for (auto& [fd, c] : conns_) pfds.push_back({fd, POLLIN | POLLRDHUP, 0});
    int n = ::poll(pfds.data(), pfds.size(), 100);
    if (n > 0) {
      if (pfds[0].revents & POLLIN) Accept();
      for (size_t i = 2; i < pfds.size(); ++i) {
        if (pfds[i].revents == 0) continue;
        char buf[64];
        ssize_t r = ::recv(pfds[i].fd, buf, sizeof buf, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR) ||
            (pfds[i].revents & (POLLHUP | POLLERR | POLLRDHUP))) {
          Drop(pfds[i].fd);
        }
      }
    }
    // Attached sessions that never connected.
    std::vector<uint32_t> expired;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto now = std::chrono::steady_clock::now();
      for (auto it = pending_.begin(); it != pending_.end();) {
        if (now > it->second.deadline) {
          if (store_->CheckSession(it->first, it->second.token).ok()) expired.push_back(it->first);
          it = pending_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (uint32_t s : expired) {
      MOE_LOG(WARNING) << "session " << s << " never connected its session socket; dropped";
      store_->CloseSession(s);
    }
    store_->Maintain();
  }
}

}  // namespace moe::expertd
