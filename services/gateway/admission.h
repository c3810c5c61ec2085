// Admission control: API keys, a per-key concurrent-request limit, and a
// bounded FIFO queue in front of a fixed number of running slots.
//
// Numbers: a worker decodes a few dozen sequences per step; the gateway
// runs at most `max_running` requests at once (sum of worker slots) and
// lets at most `max_queued` more wait. Request max_running + max_queued + 1
// is refused at once with 503 + Retry-After instead of growing a queue
// without bound; a key holding `per_key_limit` requests gets 429.
//
// Contract: Admit() never blocks. A Ticket that is not yet running waits in
// FIFO order in WaitRunning(); dropping a Ticket (running or queued)
// releases its slot and its key's count. Keys: none configured = open
// server (no 401, no per-key limit); otherwise `Authorization: Bearer <key>`
// must name a configured key.
// Thread safety: all methods are thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <variant>

#include "absl/status/statusor.h"
#include "services/gateway/api_error.h"

namespace moe::gateway {

class ApiKeys {
 public:
  ApiKeys() = default;
  // Keys from flags plus a file (one key per line, '#' comments); empty path = none.
  static absl::StatusOr<ApiKeys> Load(const std::vector<std::string>& keys, const std::string& file);
  bool open() const { return keys_.empty(); }
  // `authorization`: the raw Authorization header ("Bearer KEY"); `x_api_key`: the x-api-key
  // header. Either may be empty; both given must name the same key. Returns the key
  // (identity) or a 401.
  std::variant<std::string, ApiError> Check(const std::string& authorization, const std::string& x_api_key = "") const;

 private:
  std::set<std::string> keys_;
};

struct AdmissionConfig {
  int max_running = 64;
  int max_queued = 64;
  int per_key_limit = 0;  // 0 = unlimited
  int retry_after_s = 1;
};

class AdmissionController {
 public:
  explicit AdmissionController(AdmissionConfig config);

  class Ticket {
   public:
    ~Ticket();
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    // Blocks until the request may run. Polls `abort` every `poll`; returns
    // false (and stays queued until destroyed) when it says to stop.
    bool WaitRunning(const std::function<bool()>& abort, std::chrono::milliseconds poll);
    bool running() const;

   private:
    friend class AdmissionController;
    Ticket(AdmissionController* owner, std::string key, uint64_t id) : owner_(owner), key_(std::move(key)), id_(id) {}
    AdmissionController* owner_;
    std::string key_;
    uint64_t id_;
    bool running_ = false;  // guarded by owner_->mu_
  };

  // `key` empty = anonymous (no per-key limit).
  std::variant<std::unique_ptr<Ticket>, ApiError> Admit(const std::string& key);

  int running() const;
  int queued() const;
  const AdmissionConfig& config() const { return config_; }

 private:
  void Release(Ticket* t);
  void PromoteLocked();

  const AdmissionConfig config_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int running_ = 0;
  std::deque<Ticket*> queue_;
  std::map<std::string, int> per_key_;
  uint64_t next_id_ = 1;
};

}  // namespace moe::gateway
