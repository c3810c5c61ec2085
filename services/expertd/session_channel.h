// SessionChannel: expertd's side of the worker session sockets.
//
// A worker attaches over gRPC (session index + token), then connects to the
// session socket, proves the token and receives the two memfds. The
// connection stays open for the session's life; one thread polls every
// connection (100 ms tick) and, when one closes — the worker detached,
// crashed or was SIGKILLed; the kernel closes its fds — drops that session's
// leases (well within the 1 s the invariant allows). Sessions whose worker
// never connects are dropped after `connect_timeout`. The same tick runs
// ExpertStore::Maintain (hit harvesting, budget shrinks).
//
// Thread safety: Expect() may be called from any thread; Start/Stop once.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "common/expertstore/store.h"

namespace moe::expertd {

class SessionChannel {
 public:
  SessionChannel(expertstore::ExpertStore* store, std::string path) : store_(store), path_(std::move(path)) {}
  ~SessionChannel() { Stop(); }
  absl::Status Start();
  void Stop();
  const std::string& path() const { return path_; }
  // Registers an attached session that must connect within the timeout.
  void Expect(uint32_t session, uint64_t token);

 private:
  void Loop();
  void Accept();
  void Drop(int fd);

  expertstore::ExpertStore* store_;
  std::string path_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  struct Pending {
    uint64_t token;
    std::chrono::steady_clock::time_point deadline;
  };
  std::map<uint32_t, Pending> pending_;  // session -> awaiting its connection
  struct Conn {
    uint32_t session;
    uint64_t token;  // 0 until the hello arrived
  };
  std::map<int, Conn> conns_;  // fd -> session
};

}  // namespace moe::expertd
