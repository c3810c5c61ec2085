// What the inferd batcher needs from a model: per-sequence KV state, a
// forward pass over a step's rows (several sequences, each a few tokens),
// and a prefix copy of a state (prefix KV reuse).
//
// Contract:
//  - Forward(items): for each item, feeds item.tokens at positions
//    state.length() ... into item.state, and when item.logits is non-null
//    writes the logits (vocab_size floats) of its LAST row there. A row's
//    result never depends on the other items of the call (batch invariance,
//    docs/ARCHITECTURE.md invariant 1): the same sequence gives the same tokens alone
//    or batched. An error fails the whole step (the batcher fails the step's
//    sequences with it).
//  - Clone(state, n): a new state holding the first n tokens of `state`
//    (n <= state.length()); the source is not modified.
//  - Persistence (the prefix cache's disk tier, prefix_disk_tier.h), for a
//    model with a StateIdentity(): SerializeState(state) gives bytes that
//    ParseState turns back into an equal state - in this process or another
//    one whose StateIdentity() is the same string. The identity
//    names everything a state's contents depend on (weights, numerics, KV
//    layout): two models whose states differ never share it.
//  - Speculative decoding (docs/SERVING.md): an item with logit_rows = R > 1
//    (a verify: its last token + R - 1 drafts) gets the logits of its last R
//    rows, each bit-identical to what feeding the rows one by one would give;
//    Truncate(state, n) then drops the rejected positions >= n so the state
//    is exactly the one that never fed them; DraftMtp proposes drafts from
//    the model's MTP layer (models that have one and were asked to keep it
//    extended).
// Thread safety: Forward/Clone are called from the batcher thread only;
// Clone's source may be shared (read-only) by the prefix cache.
// SerializeState/ParseState may run on another thread (the tier's writer)
// concurrently with Forward: they touch only the state given.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace moe::inferd {

class SeqState {
 public:
  virtual ~SeqState() = default;
  virtual int64_t length() const = 0;  // tokens fed so far
  virtual int64_t bytes() const = 0;   // memory held (prefix cache budget)
};

class SequenceModel {
 public:
  struct Item {
    SeqState* state = nullptr;
    std::span<const int32_t> tokens;
    float* logits = nullptr;  // logit_rows x vocab_size() floats, or null (no logits needed)
    int64_t logit_rows = 1;   // the last rows whose logits are wanted (> 1: a verify)
    bool prefill = false;     // prompt rows: experts only they use are fetched as prefill (FetchUse::kPrefill)
  };
  // A layer-major pass (planned prefill, docs/SERVING.md): items fed a few
  // decoder layers at a time, so that other sequences' steps run between its
  // layers. The items' states are the pass's until FinishPass (or until the
  // batcher abandons the pass and truncates them back); their `logits`
  // buffers must live as long.
  class Pass {
   public:
    virtual ~Pass() = default;
    virtual bool layers_done() const = 0;
  };

  virtual ~SequenceModel() = default;
  virtual std::string name() const = 0;
  virtual int32_t vocab_size() const = 0;
  virtual int64_t max_context() const = 0;
  virtual std::unique_ptr<SeqState> NewState() = 0;
  virtual absl::StatusOr<std::unique_ptr<SeqState>> Clone(const SeqState& state, int64_t n) = 0;
  virtual absl::Status Forward(std::span<Item> items) = 0;
  // Expert cache hit rate of the model's expert source, or < 0 when unknown.
  virtual double expert_hit_rate() const { return -1.0; }
  // Whether steps can run now (e.g. the expert source's daemon is there): OK or
  // Unavailable naming the cause. Called from the Health RPC thread, not the batcher's.
  virtual absl::Status Health() { return absl::OkStatus(); }
  // The KV memory every live sequence of this worker shares (a serving plan's
  // context, docs/PLAN.md), and one token's KV; 0: no such limit. The batcher
  // admits a sequence only with room for its prompt + max_tokens, and keeps
  // its prefix cache within what the live sequences leave.
  virtual int64_t kv_budget_bytes() const { return 0; }
  virtual int64_t kv_bytes_per_token() const { return 0; }
  // See "Persistence" above; Unimplemented (the default): states cannot be
  // persisted. Called once, at start, when the disk tier is configured.
  virtual absl::StatusOr<std::string> StateIdentity() const {
    return absl::UnimplementedError(absl::StrCat(name(), ": states cannot be persisted"));
  }
  virtual absl::StatusOr<std::string> SerializeState(const SeqState& state) const {
    return absl::UnimplementedError(absl::StrCat(name(), ": states cannot be persisted"));
  }
  // `label` (the file) names the source in errors: DataLoss for damaged
  // bytes, FailedPrecondition for a state of another layout or version.
  virtual absl::StatusOr<std::unique_ptr<SeqState>> ParseState(std::string_view bytes,
                                                               const std::string& label) const {
    return absl::UnimplementedError(absl::StrCat(name(), ": states cannot be persisted (", label, ")"));
  }
  // Speculation: whether Truncate works (false: the batcher never drafts), the
  // rollback itself, and MTP drafts (up to k after `tokens` = the state's fed
  // tokens and `next`, the token about to be fed; empty when the model has no
  // MTP drafter or the state's MTP cache does not cover its context).
  virtual bool can_rollback() const { return false; }
  virtual absl::Status Truncate(SeqState& state, int64_t n) {
    return absl::UnimplementedError("this model cannot roll back drafts");
  }
  virtual bool has_mtp_drafts() const { return false; }
  // Keep every state's MTP drafter extended (before any state is made);
  // InvalidArgument naming the cause when the model has no MTP layer.
  virtual absl::Status set_mtp_drafts(bool on) {
    if (on) return absl::InvalidArgumentError(absl::StrCat(name(), " has no MTP layer"));
    return absl::OkStatus();
  }
  virtual absl::StatusOr<std::vector<int32_t>> DraftMtp(SeqState& state, std::span<const int32_t> tokens,
                                                        int32_t next, int k) {
    return std::vector<int32_t>{};
  }
  // Positions the state's MTP drafter would have to catch up on before its next draft (0: current or none).
  virtual int64_t MtpBehind(const SeqState& state) const { return 0; }
  // Passes: how many rows of activations `budget_bytes` holds (0: this model
  // runs no passes; the batcher then feeds prompts in chunks), and the pass
  // itself: Begin checks and embeds (as Forward would), Advance runs up to
  // `layers` more decoder layers, Finish writes the items' logits. Results
  // are bit-identical to Forward(items). Needs can_rollback() (an abandoned
  // pass is truncated away).
  virtual int64_t pass_rows_for_bytes(int64_t budget_bytes) const { return 0; }
  // The bytes of one pass when inferd's flag does not say: the serving plan's,
  // else the model's default (0: none).
  virtual int64_t default_pass_bytes() const { return 0; }
  virtual absl::StatusOr<std::unique_ptr<Pass>> BeginPass(std::span<const Item> items) {
    return absl::UnimplementedError(absl::StrCat(name(), ": no layer-major passes"));
  }
  virtual absl::Status AdvancePass(Pass& pass, int layers) {
    return absl::UnimplementedError(absl::StrCat(name(), ": no layer-major passes"));
  }
  virtual absl::Status FinishPass(Pass& pass) {
    return absl::UnimplementedError(absl::StrCat(name(), ": no layer-major passes"));
  }
  // Routed-expert fetches (ExpertSource Gets) so far, or < 0 when unknown.
  // A batched step fetches each distinct (layer, expert) once.
  virtual int64_t expert_fetches() const { return -1; }
  // Expert parallelism across hosts (services/peer), running totals; all 0 without it.
  struct PeerCounters {
    int64_t remote_jobs = 0, fallback_jobs = 0, failed_calls = 0;  // (layer, expert) jobs sent / redone here
    int64_t bytes_sent = 0, bytes_received = 0;                    // row payloads
    int64_t served_jobs = 0, refused_calls = 0;                    // as the owner, for other hosts
  };
  virtual PeerCounters peer_counters() const { return {}; }
};

}  // namespace moe::inferd
