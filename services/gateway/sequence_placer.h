// Places sequences on workers: least-loaded with prefix affinity, dead
// workers out of rotation, retry elsewhere when nothing was streamed yet.
//
// Numbers: a prompt is cut into blocks of `block_tokens` (64) tokens; block i
// is named by a rolling hash of blocks 0..i. Each worker remembers the last
// `remembered_blocks` (65536) block hashes it was sent. A request goes to the
// worker with the longest remembered prefix among the workers whose load is
// within `affinity_slack` sequences of the least-loaded one (ties: lower
// load, then lower index) -- the worker most likely to reuse a prefix KV
// cache without piling work onto one worker.
//
// Failure: a worker whose stream fails with Unavailable (or whose Health
// probe fails) leaves the rotation until a probe succeeds. A sequence whose
// worker failed before any token reached the client is restarted on another
// live worker (at most `max_attempts` in all); after a token was streamed it
// ends with the worker's error. With no live worker, Start() reports
// Unavailable at once.
// Thread safety: all public methods are thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "absl/status/status.h"
#include "services/gateway/worker.h"

namespace moe::gateway {

struct SequencePlacerConfig {
  int block_tokens = 64;
  int affinity_slack = 2;
  int max_attempts = 3;
  size_t remembered_blocks = 65536;
};

struct WorkerSnapshot {
  std::string name;
  bool alive = true;
  int active = 0;
  int64_t tokens_generated = 0;
  int64_t sequences_started = 0;
  int64_t failures = 0;
  std::string last_error;
  WorkerInfo info;  // from the last successful probe
};

class SequencePlacer {
 public:
  SequencePlacer(std::vector<std::shared_ptr<Worker>> workers, SequencePlacerConfig config);
  ~SequencePlacer();

  // Same contract as Worker::Generate (see worker.h), across all workers.
  std::unique_ptr<SeqHandle> Start(GenerateParams params, SeqSink sink);

  // The worker Start() would choose now (-1: none alive); records nothing.
  int Pick(const std::vector<int32_t>& prompt) const;

  // Calls Health() on every worker; updates liveness and figures. A healthy
  // worker the admission check refuses stays out of rotation, the reason in
  // its last_error (logged once per change).
  void ProbeAll();
  // Installs the admission check applied by later probes (e.g. the gateway's
  // vocabulary check for workers that come up after start).
  using Admission = std::function<absl::Status(const std::string& worker, const WorkerInfo& info)>;
  void SetAdmission(Admission admit);
  void MarkDead(size_t index, const std::string& why);

  std::vector<WorkerSnapshot> Snapshot() const;
  size_t size() const { return workers_.size(); }
  int alive_count() const;

  // Prefix block hashes of a prompt (exposed for tests).
  static std::vector<uint64_t> BlockHashes(const std::vector<int32_t>& prompt, int block_tokens);

 private:
  struct Slot {
    std::shared_ptr<Worker> worker;
    bool alive = true;
    int active = 0;
    int64_t tokens = 0;
    int64_t started = 0;
    int64_t failures = 0;
    std::string last_error;
    bool refused = false;  // healthy but refused by admission
    WorkerInfo info;
    std::unordered_set<uint64_t> blocks;
    std::deque<uint64_t> block_order;
  };
  class Handle;
  friend class Handle;

  int PickLocked(const std::vector<uint64_t>& hashes, const std::vector<bool>* exclude) const;
  void RememberLocked(int idx, const std::vector<uint64_t>& hashes);

  const SequencePlacerConfig config_;
  std::vector<std::shared_ptr<Worker>> workers_;
  mutable std::mutex mu_;
  std::vector<Slot> slots_;
  Admission admit_;  // guarded by mu_
};

}  // namespace moe::gateway
