#include "common/model/local_expert_source.h"

#include <chrono>
#include <iterator>

#include "common/base/status.h"

namespace moe {

LocalExpertSource::LocalExpertSource(ExpertLoader loader, int64_t budget_bytes)
    : loader_(std::move(loader)), budget_(budget_bytes < 0 ? 0 : budget_bytes) {}

LocalExpertSource::~LocalExpertSource() = default;

absl::StatusOr<ExpertLease> LocalExpertSource::Get(int layer, int expert) {
  return GetFor(layer, expert, FetchUse::kDecode);
}

absl::Status LocalExpertSource::GetEach(int layer, std::span<const int> experts, const ExpertReady& ready,
                                        FetchUse use) {
  for (size_t i = 0; i < experts.size(); ++i) {
    absl::StatusOr<ExpertLease> l = GetFor(layer, experts[i], use);
    if (!l.ok()) return l.status();
    MOE_RETURN_IF_ERROR(ready(i, std::move(*l)));
  }
  return absl::OkStatus();
}

absl::StatusOr<ExpertLease> LocalExpertSource::GetFor(int layer, int expert, FetchUse use) {
  const bool scan = use == FetchUse::kPrefill;
  const uint64_t key = Key(layer, expert);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.gets;
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    ++stats_.hits;
    if (!scan) lru_.splice(lru_.begin(), lru_, it->second.lru_it);
  } else {
    ++stats_.misses;
    const auto t0 = std::chrono::steady_clock::now();
    auto loaded = loader_(layer, expert);
    stats_.fetch_wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!loaded.ok()) return Annotate(loaded.status(), absl::StrCat("expert (layer ", layer, ", id ", expert, ")"));
    Entry e;
    e.expert = std::make_unique<OwnedExpert>(std::move(*loaded));
    e.view = e.expert->View();
    const int64_t b = e.expert->Bytes();
    stats_.bytes_read += b;
    stats_.resident_bytes += b;
    if (scan) {
      lru_.push_back(key);
      e.lru_it = std::prev(lru_.end());
    } else {
      lru_.push_front(key);
      e.lru_it = lru_.begin();
    }
    it = entries_.emplace(key, std::move(e)).first;
  }
  ++it->second.pins;
  const ExpertWeights* w = &it->second.view;
  TrimLocked();
  return ExpertLease(w, [this, key] { Release(key); });
}

void LocalExpertSource::Release(uint64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  --it->second.pins;
  TrimLocked();
}

void LocalExpertSource::TrimLocked() {
  auto rit = lru_.end();
  while (stats_.resident_bytes > budget_ && rit != lru_.begin()) {
    --rit;
    auto it = entries_.find(*rit);
    if (it->second.pins > 0) continue;
    stats_.resident_bytes -= it->second.expert->Bytes();
    ++stats_.evictions;
    rit = lru_.erase(rit);
    entries_.erase(it);
  }
}

ExpertSourceStats LocalExpertSource::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace moe
