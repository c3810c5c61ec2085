#include "services/inferd/prefix_cache.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/base/log.h"

namespace moe::inferd {

PrefixCache::PrefixCache(int64_t max_bytes, const SequenceModel* model, std::shared_ptr<PrefixDiskTier> disk)
    : max_bytes_(max_bytes), model_(model), disk_(model != nullptr ? std::move(disk) : nullptr) {
  if (disk_) writer_ = std::thread([this] { SpillLoop(); });
}

PrefixCache::~PrefixCache() {
  {
    std::lock_guard<std::mutex> lock(spill_mu_);
    stop_ = true;
  }
  spill_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

void PrefixCache::Insert(std::vector<int32_t> tokens, std::shared_ptr<const SeqState> state) {
  if (!state || tokens.empty() || static_cast<int64_t>(tokens.size()) != state->length()) return;
  if (disk_) {
    std::lock_guard<std::mutex> lock(spill_mu_);
    if (spills_.size() >= kMaxPendingSpills) {
      spills_.pop_front();
      ++spills_dropped_;
    }
    spills_.push_back({tokens, state});
    spill_cv_.notify_all();
  }
  InsertRam(std::move(tokens), std::move(state));
}

void PrefixCache::InsertRam(std::vector<int32_t> tokens, std::shared_ptr<const SeqState> state) {
  const int64_t b = state->bytes();
  if (b > max_bytes_) return;
  // An entry that is a prefix of the new one is redundant.
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->tokens.size() <= tokens.size() && std::equal(it->tokens.begin(), it->tokens.end(), tokens.begin())) {
      bytes_ -= it->bytes;
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  entries_.push_front({std::move(tokens), std::move(state), b});
  bytes_ += b;
  EvictToBudget();
}

void PrefixCache::EvictToBudget() {
  while (bytes_ > max_bytes_ && !entries_.empty()) {
    bytes_ -= entries_.back().bytes;
    entries_.pop_back();
  }
}

void PrefixCache::SetMaxBytes(int64_t max_bytes) {
  max_bytes_ = std::max<int64_t>(0, max_bytes);
  EvictToBudget();
}

PrefixCache::Hit PrefixCache::Lookup(const std::vector<int32_t>& prompt) {
  Hit best;
  auto best_it = entries_.end();
  const size_t limit = prompt.empty() ? 0 : prompt.size() - 1;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    size_t n = std::min(limit, it->tokens.size());
    size_t k = 0;
    while (k < n && it->tokens[k] == prompt[k]) ++k;
    if (static_cast<int64_t>(k) > best.tokens) {
      best.tokens = static_cast<int64_t>(k);
      best.state = it->state;
      best_it = it;
    }
  }
  if (disk_) {
    Hit d = LookupDisk(prompt, static_cast<int64_t>(limit), best.tokens);
    if (d.tokens > best.tokens) return d;
  }
  if (best_it != entries_.end()) entries_.splice(entries_.begin(), entries_, best_it);
  return best;
}

PrefixCache::Hit PrefixCache::LookupDisk(const std::vector<int32_t>& prompt, int64_t limit, int64_t ram_tokens) {
  Hit hit;
  PrefixDiskTier::Candidate c = disk_->FindLongest(prompt, limit);
  if (c.common <= ram_tokens) return hit;
  auto payload = disk_->Read(c);
  if (!payload.ok()) return hit;  // gone (another worker evicted it) or refused: logged by the tier
  auto state = model_->ParseState(*payload, c.path);
  if (state.ok() && (*state)->length() != static_cast<int64_t>(c.tokens.size())) {
    state = absl::DataLossError(absl::StrCat("the state holds ", (*state)->length(), " tokens, the file names ",
                                             c.tokens.size()));
  }
  if (!state.ok()) {
    disk_->Reject(c.path, state.status());
    return hit;
  }
  hit.state = std::shared_ptr<const SeqState>(std::move(*state));
  hit.tokens = c.common;
  hit.from_disk = true;
  ++disk_hits_;
  disk_hit_tokens_ += c.common;
  InsertRam(std::move(c.tokens), hit.state);  // on disk already: not spilled again
  return hit;
}

void PrefixCache::SpillLoop() {
  std::unique_lock<std::mutex> lock(spill_mu_);
  while (true) {
    spill_cv_.wait(lock, [&] { return stop_ || !spills_.empty(); });
    if (spills_.empty()) return;  // stopping, everything written
    Spill s = std::move(spills_.front());
    spills_.pop_front();
    spilling_ = true;
    lock.unlock();
    absl::Status st;
    auto bytes = model_->SerializeState(*s.state);
    st = bytes.ok() ? disk_->Store(s.tokens, *bytes) : bytes.status();
    if (!st.ok()) MOE_LOG(WARNING) << "prefix cache: spill of a " << s.tokens.size() << "-token prefix failed: " << st;
    s = Spill{};  // the state is released before the next wait
    lock.lock();
    spilling_ = false;
    if (!st.ok()) ++spill_errors_;
    spill_cv_.notify_all();
  }
}

void PrefixCache::FlushSpills() {
  std::unique_lock<std::mutex> lock(spill_mu_);
  spill_cv_.wait(lock, [&] { return spills_.empty() && !spilling_; });
}

PrefixCacheStats PrefixCache::stats() const {
  PrefixCacheStats s;
  s.disk_hits = disk_hits_;
  s.disk_hit_tokens = disk_hit_tokens_;
  {
    std::lock_guard<std::mutex> lock(spill_mu_);
    s.spills_dropped = spills_dropped_;
    s.spill_errors = spill_errors_;
  }
  if (disk_) s.disk = disk_->stats();
  return s;
}

}  // namespace moe::inferd
