// Prefix KV reuse: KV states of finished sequences, looked up by the longest
// common token prefix with a new prompt.
//
// Numbers: a chat's system prompt + history is often most of the next
// request's prompt (thousands of tokens); reusing its KV skips that much
// prefill. States are kept up to `max_bytes` (SeqState::bytes), least
// recently used dropped first. Lookup is a linear scan over the entries
// (tens of entries, token compare at memory speed).
// A hit never covers the whole prompt: at least one prompt token is fed so
// the step that samples the first token has logits.
//
// Disk tier (optional, prefix_disk_tier.h): every inserted state is also
// spilled to disk - serialized by the model and written by this cache's own
// writer thread, so a step never waits for a disk write (at most
// kMaxPendingSpills states wait; past that the oldest waiting one is
// dropped, counted). A lookup whose longest match is on disk rather than in
// RAM reads that file on the calling (batcher) thread, verified, and keeps the
// state in RAM too. Destruction writes what is still waiting, so a worker
// stopped by SIGTERM leaves every finished sequence on disk.
// Thread safety: not thread-safe (the batcher thread owns it); the writer
// thread only reads states that no one modifies any more.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "services/inferd/prefix_disk_tier.h"
#include "services/inferd/sequence_model.h"

namespace moe::inferd {

struct PrefixCacheStats {
  int64_t disk_hits = 0;        // lookups served from a disk file
  int64_t disk_hit_tokens = 0;  // prompt tokens those reused
  int64_t spills_dropped = 0;   // states not written (the writer was kMaxPendingSpills behind)
  int64_t spill_errors = 0;     // serialization or write failures (logged)
  PrefixDiskStats disk;         // the tier's own counters (zeros without a tier)
};

class PrefixCache {
 public:
  static constexpr size_t kMaxPendingSpills = 4;

  // `disk` (with the `model` that serializes states for it) may be null: RAM only.
  explicit PrefixCache(int64_t max_bytes, const SequenceModel* model = nullptr,
                       std::shared_ptr<PrefixDiskTier> disk = nullptr);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // `tokens` are exactly the tokens fed into `state` (state->length()).
  void Insert(std::vector<int32_t> tokens, std::shared_ptr<const SeqState> state);

  struct Hit {
    int64_t tokens = 0;
    std::shared_ptr<const SeqState> state;
    bool from_disk = false;
  };
  Hit Lookup(const std::vector<int32_t>& prompt);

  // Lowers (or raises) the budget, dropping least recently used entries now.
  void SetMaxBytes(int64_t max_bytes);
  int64_t max_bytes() const { return max_bytes_; }
  int64_t bytes() const { return bytes_; }
  size_t size() const { return entries_.size(); }
  PrefixCacheStats stats() const;
  // Blocks until every spill queued so far is written (tests).
  void FlushSpills();

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    std::shared_ptr<const SeqState> state;
    int64_t bytes = 0;
  };
  struct Spill {
    std::vector<int32_t> tokens;
    std::shared_ptr<const SeqState> state;
  };
  void InsertRam(std::vector<int32_t> tokens, std::shared_ptr<const SeqState> state);
  void EvictToBudget();
  // The disk's candidate for `prompt` when it beats `ram_tokens`, loaded.
  Hit LookupDisk(const std::vector<int32_t>& prompt, int64_t limit, int64_t ram_tokens);
  void SpillLoop();

  int64_t max_bytes_;
  int64_t bytes_ = 0;
  std::list<Entry> entries_;  // most recently used first
  const SequenceModel* model_;
  std::shared_ptr<PrefixDiskTier> disk_;
  int64_t disk_hits_ = 0, disk_hit_tokens_ = 0;

  mutable std::mutex spill_mu_;
  std::condition_variable spill_cv_;
  std::deque<Spill> spills_;  // under spill_mu_
  bool spilling_ = false;     // the writer holds one (under spill_mu_)
  bool stop_ = false;
  int64_t spills_dropped_ = 0, spill_errors_ = 0;  // under spill_mu_
  std::thread writer_;
};

}  // namespace moe::inferd
