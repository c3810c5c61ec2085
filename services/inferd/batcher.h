// Continuous batching over a SequenceModel: one thread runs steps; each step
// takes every active sequence (decode: 1 token; prefill: a chunk, see
// step_planner.h), runs one Forward over all of them, samples, and streams
// each new token to its sequence's callback.
//
// Numbers: up to `max_sequences` (64) live sequences; a step feeds at most
// `max_step_tokens` (512) tokens; prompts go in chunks of `prefill_chunk`
// (128); a prompt with more than `prefill_chunk` tokens left goes instead in
// layer-major passes (planned prefill, below). Prefix KV states of finished sequences are kept up to
// `prefix_cache_bytes` and reused by new prompts that share a prefix; with
// `prefix_disk` they are also spilled to disk and found there by any worker
// of the same model (prefix_cache.h, prefix_disk_tier.h).
//
// Per-token options (FeedBack): repetition penalty over prompt + output, logit_bias,
// stop ids banned before min_tokens, and a structured-output constraint: its mask is filled
// just before the draw and the drawn token accepted into it, so every token of a constrained
// sequence is legal and a constrained sequence ends only with a stop token its grammar allows
// (or by length). Masks are per sequence: the other rows of the step are untouched.
//
// Speculative decoding (config.spec; docs/SERVING.md): a decoding sequence
// may feed its pending token + up to K drafts (forced tokens of its
// constraint first, else n-gram / MTP drafts by the mode; auto picks the
// depth per step from the sequence's measured acceptance and the worker's
// measured step cost by rows) in the same step as everybody else's rows and
// prefill chunks; its rows are drawn in order exactly as plain decode steps
// would draw them (same sampler, mask, penalties, keyed draw
// KeyedRng(seed, output index)) until one differs from its draft, and the
// state is truncated to what was accepted (SequenceModel::Truncate). So the
// tokens never depend on speculation, greedy or seeded. batcher_spec.cc.
//
// Planned prefill (`prefill_pass_rows` > 0 and a model that runs passes,
// SequenceModel::Pass; docs/SERVING.md): the long prompts waiting are fed
// together in one layer-major pass of up to prefill_pass_rows rows (the rows
// a worker's activation budget holds; a prompt longer than that is split
// into equal parts, one pass each), so each routed expert is read at most
// once per pass instead of once per 128-token chunk. The pass advances a
// layer at a time and yields to a normal step of everybody else after
// `prefill_slice_seconds` (the latency it adds to their tokens:
// Stats::max_pass_slice_seconds); with nobody else waiting it runs through.
// Tokens are bit-identical to chunked prefill (batch invariance). A pass
// whose sequence is cancelled is abandoned: its members' states are
// truncated back and they join the next pass.
//
// Cancellation: Cancel(id) marks the sequence; the loop drops marked
// sequences before planning each step, so a cancelled sequence takes part in
// no step that starts after Cancel returned (Stats::max_steps_after_cancel
// counts violations; a step already running when Cancel came is finished but
// its token for that sequence is not delivered).
// Callbacks run on the batcher thread, outside the lock; they must not block
// (the gRPC service queues the output for its stream's thread). Every
// accepted sequence gets exactly one callback with `finished` set.
// Thread safety: Submit/Cancel/stats are thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "services/inferd/prefix_cache.h"
#include "common/sampling/sampler.h"
#include "common/sampling/spec.h"
#include "common/sampling/token_constraint.h"
#include "services/inferd/sequence_model.h"
#include "services/inferd/step_planner.h"

namespace moe::inferd {

struct BatcherConfig {
  int max_sequences = 64;
  int64_t max_step_tokens = 512;
  int64_t prefill_chunk = 128;
  int64_t prefix_cache_bytes = int64_t{1} << 30;
  // The prefix cache's disk tier (--prefix-cache-dir); null: RAM only.
  std::shared_ptr<PrefixDiskTier> prefix_disk;
  SpecOptions spec;  // off unless inferd's --speculative says otherwise
  // Planned prefill (above): rows per layer-major pass (0: chunks only) and
  // the longest a pass runs while other sequences wait for a step.
  int64_t prefill_pass_rows = 0;
  double prefill_slice_seconds = 0.05;
};

struct SeqRequest {
  std::string id;
  std::vector<int32_t> prompt;
  int32_t max_tokens = 16;
  SampleParams sampling;
  bool has_seed = false;
  uint64_t seed = 0;
  int32_t logprobs = -1;
  std::vector<int32_t> stop_token_ids;
  int32_t min_tokens = 0;  // stop_token_ids are banned until this many tokens were generated
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Structured output (token_constraint.h): every token is drawn under its mask and
  // accepted into it; null = free.
  std::shared_ptr<TokenConstraint> constraint;  // one per sequence, never shared between two
};

enum class EndReason { kStop, kLength, kCancelled, kError };

struct SeqOutput {
  std::vector<SampleResult> tokens;
  bool finished = false;
  EndReason reason = EndReason::kStop;
  absl::Status error;  // kError
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_prompt_tokens = 0;
  // Speculation: drafts accepted / rejected over the sequence (OpenAI's
  // usage.completion_tokens_details.accepted/rejected_prediction_tokens).
  int32_t accepted_prediction_tokens = 0;
  int32_t rejected_prediction_tokens = 0;
};

using SeqCallback = std::function<void(SeqOutput)>;

struct BatcherStats {
  int64_t steps = 0;
  int64_t decode_tokens = 0;
  int64_t prefill_tokens = 0;
  int64_t generated = 0;
  double tokens_per_second = 0;
  int active = 0;
  int waiting = 0;  // prompt not fully fed yet
  int64_t prefix_hit_tokens = 0;
  int64_t prefix_lookups = 0;
  int64_t cancelled = 0;
  int64_t max_steps_after_cancel = 0;
  int64_t max_batch_rows = 0;
  // Routed-expert fetches of all steps / of the last step (model reports
  // them; 0 when it does not). One per distinct (layer, expert) per step.
  int64_t expert_fetches = 0;
  int64_t last_step_expert_fetches = 0;
  int64_t kv_bytes = 0;  // live sequences' KV (as of the last step)
  int64_t prefix_cache_bytes = 0;
  int64_t prefix_cache_entries = 0;
  PrefixCacheStats prefix;  // its disk tier (as of the last step)
  int64_t constrained = 0;  // sequences admitted with a constraint
  int64_t errors = 0;
  std::string last_error;
  SpecStats spec;  // decode steps of every sequence: drafts, acceptance per position, tokens per step
  // The verify cost: whole loop periods (seconds) and tokens of pure decode steps, plain and with drafts
  // (verify), and auto's DraftGuard verdicts against a drafter.
  double spec_plain_step_seconds = 0, spec_verify_step_seconds = 0;
  int64_t spec_plain_step_tokens = 0, spec_verify_step_tokens = 0;
  int64_t spec_guard_blocks = 0;
  // Planned prefill: passes finished, their rows, passes abandoned (a member
  // cancelled), and the longest slice other sequences waited behind.
  int64_t prefill_passes = 0;
  int64_t prefill_pass_rows = 0;
  int64_t prefill_pass_aborts = 0;
  double max_pass_slice_seconds = 0;
};

class Batcher {
 public:
  Batcher(SequenceModel* model, BatcherConfig config);
  ~Batcher();  // Shutdown()

  // InvalidArgument for a bad request (also one whose prompt + max_tokens
  // exceeds the model's whole KV budget), ResourceExhausted when full (live
  // sequences, or the KV budget the live ones hold),
  // AlreadyExists for a live id, Unavailable after Shutdown.
  absl::Status Submit(SeqRequest req, SeqCallback cb);
  // true when the id was live.
  bool Cancel(const std::string& id);
  BatcherStats stats() const;
  const BatcherConfig& config() const { return config_; }
  // Planned prefill is on (config().prefill_pass_rows > 0 and the model runs passes).
  bool passes_on() const { return passes_on_; }
  // Stops the loop; live sequences finish as cancelled.
  void Shutdown();

 private:
  struct Seq {
    SeqRequest req;
    SeqCallback cb;
    std::unique_ptr<SeqState> state;
    std::vector<int32_t> fed;  // tokens fed into state
    int64_t prompt_fed = 0;
    int64_t cached = 0;
    std::vector<int32_t> generated;
    std::unordered_map<int32_t, int32_t> counts;
    std::vector<int32_t> seen;  // prompt + generated (repetition penalty only)
    std::vector<uint32_t> mask;  // constraint mask scratch
    int32_t pending = -1;  // sampled, not yet fed
    uint64_t seed = 0;     // output token i draws from KeyedRng(seed, i)
    std::vector<int32_t> drafts;  // fed after `pending` in the current step
    SpecStats spec;
    AutoChoosers choosers;  // --speculative auto: this sequence's acceptance per source, MTP draft time
    DraftSource used = DraftSource::kNone;  // who drafted this step's drafts
    bool cancel = false;
    int64_t steps_after_cancel = 0;
    bool cancel_at_plan = false;  // cancelled when this step's planning began (the step "starts" there)
    int64_t kv_reserved = 0;  // bytes of the model's KV budget held for it
    bool in_pass = false;     // its state belongs to the running pass
  };
  // The running layer-major pass: its members (in active_, never removed
  // while it runs), rows each feeds, their states' lengths before it, and
  // the buffers the model's items point into.
  struct PassRun {
    std::unique_ptr<SequenceModel::Pass> pass;
    std::vector<Seq*> seqs;
    std::vector<std::vector<int32_t>> ids;
    std::vector<int64_t> len0;
    std::vector<bool> samples;
    std::vector<float> logits;  // one row per sampling member
  };
  // One step as planned: per active sequence its PlanInput, the plan, and per
  // plan entry the model item and the tokens it feeds (the items' spans).
  struct Step {
    std::vector<PlanInput> in;
    StepPlan plan;
    std::vector<SequenceModel::Item> items;
    std::vector<std::vector<int32_t>> tokens;
    int64_t decode_seqs = 0;   // entries decoding (not prefilling)
    bool has_prefill = false;  // some entry feeds a prompt chunk
    DraftSource drafter = DraftSource::kNone;  // kMtp: some entry feeds MTP drafts; else kNgram: lookup ones
    int64_t produced = 0;      // tokens drawn (FeedBack)
    double draft_seconds = 0;  // spent running the MTP layer for this step's drafts
    int64_t drafting = 0;      // entries feeding drafts
  };
  using Deliveries = std::vector<std::pair<SeqCallback, SeqOutput>>;

  // The loop thread: Admit -> StartNewSequences -> PlanOneStep -> Execute ->
  // FeedBack, then the callbacks (outside the lock).
  void Loop();
  bool Admit(Deliveries* out);
  void StartNewSequences();
  Step PlanOneStep(std::vector<float>* logits);
  absl::Status Execute(Step& step);
  void FeedBack(Step& step, const absl::Status& st, const std::vector<float>& logits, Deliveries* out);
  void EndSeq(Seq& s, EndReason why, absl::Status error, Deliveries* out);
  // Planned prefill (batcher_pass.cc): whether a prompt goes in passes, start
  // a pass over the waiting long prompts, run it for one slice (finishing it
  // through FeedBack), and abandon it (mu_ held: Admit's cancellation).
  bool WantsPass(const Seq& s) const;
  void MaybeStartPass(Deliveries* out);
  void AdvancePassSlice(Deliveries* out);
  void AbandonPassLocked();
  // The pass as a Step (indices into active_ as of now): its items begin the
  // pass and its entries feed FeedBack.
  Step PassStep();
  // Speculation (batcher_spec.cc): the drafts s feeds after its pending token
  // this step (plain_rows: the step's decoding sequences; base_rows: rows already planned, this
  // sequence's pending token included), and the rows' draws.
  // allowed: the drafters auto may use this step (the DraftGuard's verdict); forced tokens always are.
  std::vector<int32_t> Drafts(Seq& s, int64_t plain_rows, int64_t base_rows, AllowedDrafters allowed);
  // Draws row `row` of s's verify; the token, or -1 when s ends with it (*ended
  // says why: stop / length; *error set on a constraint violation).
  struct DrawCtx {
    int64_t fed_from = 0;  // the state's length before this step
    int rows = 0;          // rows drawn so far
    SeqOutput out;         // the drawn tokens
    bool stop = false, length = false;
    absl::Status error;
  };
  int32_t DrawRow(Seq& s, const float* logits, DrawCtx& c);
  // Removes a finished sequence from live_ and returns its KV reservation (mu_ held).
  void ForgetLocked(const Seq& s);

  SequenceModel* model_;
  const BatcherConfig config_;
  PrefixCache prefix_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Seq>> incoming_;
  std::vector<std::unique_ptr<Seq>> active_;  // loop thread only (cancel flag under mu_)
  std::map<std::string, Seq*> live_;          // id -> seq (incoming or active), under mu_
  bool stop_ = false;
  int64_t kv_reserved_ = 0;  // sum of live sequences' reservations, under mu_
  BatcherStats stats_;
  bool passes_on_ = false;      // config_.prefill_pass_rows > 0 and the model runs passes
  std::unique_ptr<PassRun> pass_;  // loop thread (Admit abandons it under mu_)
  DepthChooser step_cost_;  // loop thread: step seconds by rows (auto's cost side)
  AutoChoosers pooled_choosers_;  // loop thread: every sequence's acceptance, each new sequence's prior
  DraftGuard draft_guard_;  // loop thread: auto's check of realized seconds per token, drafted vs plain
  // loop thread: the last step, observed at the next one's start (its whole loop period is its cost)
  struct GuardPending {
    bool valid = false;
    std::chrono::steady_clock::time_point start;
    int64_t rows = 0, decode_seqs = 0;
    bool has_prefill = false;
    DraftSource drafter = DraftSource::kNone;
    int64_t produced = 0;
    double draft_seconds = 0;
    int64_t drafting = 0;
  } guard_pending_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, int64_t>> rate_window_;
  std::thread thread_;
};

}  // namespace moe::inferd
