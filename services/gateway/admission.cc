#include "services/gateway/admission.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/base/status.h"

namespace moe::gateway {

absl::StatusOr<ApiKeys> ApiKeys::Load(const std::vector<std::string>& keys, const std::string& file) {
  ApiKeys k;
  for (const auto& key : keys) {
    if (key.empty()) return absl::InvalidArgumentError("--api-key: empty key");
    k.keys_.insert(key);
  }
  if (!file.empty()) {
    std::ifstream in(file);
    if (!in) return absl::NotFoundError(absl::StrCat("--api-keys-file: cannot open ", file));
    std::string line;
    while (std::getline(in, line)) {
      std::string_view l = SV(absl::StripAsciiWhitespace(AV(line)));
      if (l.empty() || l[0] == '#') continue;
      k.keys_.insert(std::string(l));
    }
    if (k.keys_.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--api-keys-file ", file, " holds no key"));
    }
  }
  return k;
}

std::variant<std::string, ApiError> ApiKeys::Check(const std::string& authorization,
                                                   const std::string& x_api_key) const {
  if (open()) return std::string();
  ApiError e;
  e.http_status = 401;
  e.type = "authentication_error";
  e.code = "invalid_api_key";
  const std::string prefix = "Bearer ";
  if (authorization.empty() && x_api_key.empty()) {
    e.message = "missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'";
    return e;
  }
  std::string key = x_api_key;
  if (!authorization.empty()) {
    if (authorization.rfind(prefix, 0) != 0) {
      e.message = "malformed Authorization header: expected 'Bearer <key>'";
      return e;
    }
    key = authorization.substr(prefix.size());
    if (!x_api_key.empty() && x_api_key != key) {
      e.message = "the Authorization and x-api-key headers name different keys";
      return e;
    }
  }
  if (keys_.count(key) == 0) {
    e.message = "incorrect API key provided";
    return e;
  }
  return key;
}

AdmissionController::AdmissionController(AdmissionConfig config) : config_(config) {}

std::variant<std::unique_ptr<AdmissionController::Ticket>, ApiError> AdmissionController::Admit(
    const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!key.empty() && config_.per_key_limit > 0 && per_key_[key] >= config_.per_key_limit) {
    ApiError e;
    e.http_status = 429;
    e.type = "rate_limit_error";
    e.code = "concurrency_limit_exceeded";
    e.message = absl::StrCat("this API key already has ", config_.per_key_limit,
                             " requests in flight (its concurrent-request limit); retry when one finishes");
    e.retry_after_s = config_.retry_after_s;
    return e;
  }
  bool can_run = running_ < config_.max_running && queue_.empty();
  if (!can_run && static_cast<int>(queue_.size()) >= config_.max_queued) {
    ApiError e;
    e.http_status = 503;
    e.type = "server_error";
    e.code = "server_overloaded";
    e.message = absl::StrCat("server is full: ", running_, " requests running and ", queue_.size(),
                             " queued (queue limit ", config_.max_queued, "); retry later");
    e.retry_after_s = config_.retry_after_s;
    return e;
  }
  std::unique_ptr<Ticket> t(new Ticket(this, key, next_id_++));
  if (!key.empty()) ++per_key_[key];
  if (can_run) {
    t->running_ = true;
    ++running_;
  } else {
    queue_.push_back(t.get());
  }
  return t;
}

void AdmissionController::PromoteLocked() {
  while (running_ < config_.max_running && !queue_.empty()) {
    Ticket* t = queue_.front();
    queue_.pop_front();
    t->running_ = true;
    ++running_;
  }
  cv_.notify_all();
}

void AdmissionController::Release(Ticket* t) {
  std::lock_guard<std::mutex> lock(mu_);
  if (t->running_) {
    --running_;
  } else {
    queue_.erase(std::remove(queue_.begin(), queue_.end(), t), queue_.end());
  }
  if (!t->key_.empty()) {
    auto it = per_key_.find(t->key_);
    if (it != per_key_.end() && --it->second <= 0) per_key_.erase(it);
  }
  PromoteLocked();
}

int AdmissionController::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

int AdmissionController::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(queue_.size());
}

AdmissionController::Ticket::~Ticket() { owner_->Release(this); }

bool AdmissionController::Ticket::running() const {
  std::lock_guard<std::mutex> lock(owner_->mu_);
  return running_;
}

bool AdmissionController::Ticket::WaitRunning(const std::function<bool()>& abort, std::chrono::milliseconds poll) {
  std::unique_lock<std::mutex> lock(owner_->mu_);
  while (!running_) {
    owner_->cv_.wait_for(lock, poll);
    if (running_) break;
    lock.unlock();
    bool stop = abort && abort();
    lock.lock();
    if (stop && !running_) return false;
  }
  return true;
}

}  // namespace moe::gateway
