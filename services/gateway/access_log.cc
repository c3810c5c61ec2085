#include "services/gateway/access_log.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/json.h"

namespace moe::gateway {

absl::StatusOr<std::unique_ptr<AccessLog>> AccessLog::Open(const std::string& path) {
  auto log = std::unique_ptr<AccessLog>(new AccessLog());
  if (path.empty()) return log;
  if (path == "-") {
    log->f_ = stderr;
    return log;
  }
  log->f_ = std::fopen(path.c_str(), "a");
  if (log->f_ == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot open access log ", path, ": ", std::strerror(errno)));
  }
  log->owned_ = true;
  return log;
}

AccessLog::~AccessLog() {
  if (owned_) std::fclose(f_);
}

void AccessLog::Write(const nlohmann::json& entry) {
  if (f_ == nullptr) return;
  const std::string line = DumpJson(entry) + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  std::fwrite(line.data(), 1, line.size(), f_);
  std::fflush(f_);
}

}  // namespace moe::gateway
