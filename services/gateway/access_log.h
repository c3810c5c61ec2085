// One JSON line per request (id, route, status, tokens, TTFT, latency, ...), to a file or
// stderr, for whoever tails or ships the gateway's logs. Lines are whole: one write each,
// under a lock.
// Thread safety: Write from any thread.
#pragma once

#include <cstdio>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace moe::gateway {

class AccessLog {
 public:
  // `path`: a file (appended to), "-" for stderr, "" for no log.
  static absl::StatusOr<std::unique_ptr<AccessLog>> Open(const std::string& path);
  ~AccessLog();
  void Write(const nlohmann::json& entry);

 private:
  AccessLog() = default;
  std::mutex mu_;
  std::FILE* f_ = nullptr;
  bool owned_ = false;
};

}  // namespace moe::gateway
