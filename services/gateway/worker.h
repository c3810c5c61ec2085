// The gateway's view of one inference worker (an inferd process, or a test
// double): start a sequence, stream its tokens, cancel it, ask its health.
//
// Contract (every implementation):
//  - Generate() never blocks on generation: it returns a handle at once and
//    delivers events to `sink` from its own thread, in order, one sequence at
//    a time per handle: zero or more kToken events, then exactly ONE terminal
//    event (kFinish or kError). No call to `sink` happens after the terminal
//    event or after the handle's destructor has returned.
//  - SeqHandle::Cancel() is idempotent and non-blocking; the worker stops the
//    sequence within one decode step and the stream ends with kFinish
//    (reason kCancelled) or kError(Cancelled).
//  - kError carries a Status: Unavailable means the worker is unreachable
//    (the placer takes it out of rotation and may retry elsewhere when no
//    token has been delivered yet); other codes are final.
// Thread safety: Worker methods may be called from any thread concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace moe::gateway {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  float top_p = 1.0f;        // (0, 1]
  int32_t top_k = 0;         // 0 = off
  float min_p = 0.0f;        // [0, 1]
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;  // > 0; 1 = off
  bool has_seed = false;
  uint64_t seed = 0;
};

struct GenerateParams {
  std::string request_id;  // unique per sequence (used by Cancel)
  std::vector<int32_t> prompt;
  int32_t max_tokens = 16;
  SamplingParams sampling;
  int32_t logprobs = -1;  // -1 none, 0 chosen token only, k > 0 also top-k alternatives
  std::vector<int32_t> stop_token_ids;  // e.g. EOS; finish reason kStop
  int32_t min_tokens = 0;               // stop_token_ids cannot end it before this many tokens
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Structured output: a common/structured ConstraintSpec as JSON ("" = none) and the
  // fingerprint of the gateway's vocabulary (the worker refuses a different one).
  std::string constraint;
  uint64_t vocab_fingerprint = 0;
};

enum class FinishReason { kStop, kLength, kCancelled };

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
};

struct SeqEvent {
  enum Kind { kToken, kFinish, kError } kind = kToken;
  // kToken
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;
  // kFinish
  FinishReason finish = FinishReason::kStop;
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_prompt_tokens = 0;
  int32_t accepted_prediction_tokens = 0;  // speculative decoding's drafts, accepted / rejected
  int32_t rejected_prediction_tokens = 0;
  // kError
  absl::Status status;
};

using SeqSink = std::function<void(SeqEvent)>;

class SeqHandle {
 public:
  virtual ~SeqHandle() = default;  // implementations cancel if still running and stop calling the sink
  virtual void Cancel() = 0;
};

struct WorkerInfo {
  std::string model;
  int64_t max_context = 0;
  int32_t vocab_size = 0;  // 0 = not reported
  int32_t active_sequences = 0;
  int32_t max_sequences = 0;
  double tokens_per_second = 0.0;
  int64_t steps = 0;
  // Cache figures reported by the worker (its expert store / expertd).
  double expert_hit_rate = 0.0;
  int64_t prefix_cache_hit_tokens = 0;
  int64_t max_steps_after_cancel = 0;  // worker-side cancellation check (0 = always in time)
  int64_t cancelled = 0;
  int64_t expert_fetches = 0;  // routed-expert fetches (one per distinct expert per step when batched)
  // KV and prefix-cache use, structured outputs, errors (inferd StatsReply / HealthReply).
  int64_t kv_bytes = 0;
  int64_t prefix_cache_bytes = 0;
  int64_t prefix_cache_capacity_bytes = 0;
  int64_t prefix_cache_entries = 0;
  int64_t constrained_sequences = 0;
  double constraint_compile_ms = 0;
  uint64_t vocab_fingerprint = 0;  // 0: the worker has no vocabulary for structured outputs
  std::string constraint_vocab;    // where it came from, or why there is none
  std::string last_error;          // the worker's own (a failed step, a refused request)
  int64_t errors = 0;
  int64_t prefix_cache_lookups = 0;
  // Speculative decoding (inferd StatsReply spec_*): running totals.
  std::string speculative;
  int64_t spec_decode_steps = 0, spec_decode_tokens = 0, spec_drafted = 0, spec_accepted = 0;
  // The verify cost: pure decode steps' loop time (microseconds) and tokens, plain and verify; guard verdicts.
  int64_t spec_plain_step_us = 0, spec_plain_step_tokens = 0, spec_verify_step_us = 0, spec_verify_step_tokens = 0;
  int64_t spec_guard_blocks = 0;
  std::vector<int64_t> spec_drafted_per_position, spec_accepted_per_position;
  int32_t waiting_sequences = 0;  // prompts not yet fully fed (the queue an inference router reads)
  // The prefix cache's disk tier and planned prefill (StatsReply prefix_disk_*, prefill_*).
  int64_t prefix_disk_hit_tokens = 0, prefix_disk_bytes = 0, prefix_disk_capacity_bytes = 0, prefix_disk_files = 0,
          prefix_disk_ignored = 0;
  int64_t prefill_passes = 0, prefill_pass_rows = 0, prefill_pass_capacity_rows = 0;
  double prefill_max_slice_seconds = 0;
  // Expert parallelism across hosts (StatsReply peer_*): running totals.
  int64_t peer_remote_jobs = 0, peer_fallback_jobs = 0, peer_failed_calls = 0, peer_bytes_sent = 0,
          peer_bytes_received = 0, peer_served_jobs = 0, peer_refused_calls = 0;
};

class Worker {
 public:
  virtual ~Worker() = default;
  virtual const std::string& name() const = 0;
  virtual std::unique_ptr<SeqHandle> Generate(GenerateParams params, SeqSink sink) = 0;
  // Cheap liveness + figures; Unavailable when the worker cannot be reached.
  virtual absl::StatusOr<WorkerInfo> Health() = 0;
};

}  // namespace moe::gateway
