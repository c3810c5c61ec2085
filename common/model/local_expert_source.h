// LocalExpertSource: the engine's in-process ExpertSource - a loader function
// (checkpoint or container reads of this process) behind an LRU cache bounded
// by a byte budget. Its remote counterpart is RemoteExpertSource (expertd);
// not to be confused with expertstore::ExpertStore, expertd's tiered cache.
//
// Budget semantics: after every Get/release the resident bytes of unleased
// experts are trimmed (least recently used first) until the total is within
// `budget_bytes`. Leased experts are never evicted, so the total may exceed
// the budget by at most the experts currently leased (the engine leases the
// experts of one layer at a time: <= E per layer in a batch). A budget of 0
// evicts every expert as soon as its lease ends (every layer reloads:
// used by tests to prove results do not depend on caching).
// Thread safety: all methods are safe concurrently; loads happen under the
// source's lock (one load at a time).
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "common/expert_source/expert_source.h"
#include "common/model/weights.h"

namespace moe {

using ExpertLoader = std::function<absl::StatusOr<OwnedExpert>(int layer, int expert)>;

class LocalExpertSource final : public ExpertSource {
 public:
  LocalExpertSource(ExpertLoader loader, int64_t budget_bytes);
  ~LocalExpertSource() override;

  absl::StatusOr<ExpertLease> Get(int layer, int expert) override;
  // kPrefill: a miss enters at the LRU's cold end and a hit is not refreshed,
  // so a prefill pass's experts are the first evicted (a scan never pushes
  // out the decode working set).
  absl::Status GetEach(int layer, std::span<const int> experts, const ExpertReady& ready, FetchUse use) override;
  ExpertSourceStats Stats() const override;
  int64_t budget_bytes() const { return budget_; }

 private:
  struct Entry {
    std::unique_ptr<OwnedExpert> expert;
    ExpertWeights view;
    int pins = 0;
    std::list<uint64_t>::iterator lru_it;
  };
  static uint64_t Key(int layer, int expert) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(layer)) << 32) | static_cast<uint32_t>(expert);
  }
  absl::StatusOr<ExpertLease> GetFor(int layer, int expert, FetchUse use);
  void Release(uint64_t key);
  void TrimLocked();

  ExpertLoader loader_;
  const int64_t budget_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Entry> entries_;
  std::list<uint64_t> lru_;  // front = most recent
  ExpertSourceStats stats_;
};

}  // namespace moe
