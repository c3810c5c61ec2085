// Unix-socket helpers for handing expertd's memfds to workers (SCM_RIGHTS)
// and for the session connection whose closing tells expertd that a worker
// is gone (the kernel closes it when the process dies, however it dies).
//
// Wire (session socket): the worker sends SessionHello; expertd answers with
// SessionWelcome carrying two fds (control region, arena) or status != 0 and
// closes. Both structs are fixed-size, little-endian, with magic + version.
//
// Thread safety: plain functions on caller-owned fds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace moe::expertstore {

inline constexpr uint32_t kSessionHelloMagic = 0x4f4c4548;    // "HELO"
inline constexpr uint32_t kSessionWelcomeMagic = 0x434c4557;  // "WELC"
inline constexpr uint32_t kSessionWireVersion = 1;

struct SessionHello {
  uint32_t magic;
  uint32_t version;
  uint32_t session;
  uint32_t reserved;
  uint64_t token;
};
static_assert(sizeof(SessionHello) == 24);

struct SessionWelcome {
  uint32_t magic;
  uint32_t version;
  int32_t status;  // 0 = OK (two fds attached), else an absl status code
  uint32_t reserved;
  uint64_t control_bytes;
  uint64_t arena_bytes;
};
static_assert(sizeof(SessionWelcome) == 32);

// Listening unix socket at `path` (an existing stale socket file is replaced).
absl::StatusOr<int> ListenUnix(const std::string& path);
absl::StatusOr<int> ConnectUnix(const std::string& path);
absl::Status SendWithFds(int sock, const void* data, size_t len, const std::vector<int>& fds);
// Receives exactly `len` bytes and up to `max_fds` fds.
absl::Status RecvWithFds(int sock, void* data, size_t len, std::vector<int>* fds, int max_fds);
absl::Status ReadFull(int fd, void* data, size_t len);

}  // namespace moe::expertstore
