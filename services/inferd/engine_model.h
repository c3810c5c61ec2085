// SequenceModel over the project's engine (common/model): one moe::Engine
// (resident weights + in-process expert store), one KvCache per sequence.
//
// Forward runs ALL of a step's items (decode rows and prefill chunks of
// different sequences) as one Model::ForwardBatch: every dense/attention
// matmul, router and the LM head run once over all rows, attention runs per
// sequence on its own cache, and each distinct routed expert of a layer is
// fetched once per step and applied to every row routed to it. Only items
// that sample get an LM-head row. Batch invariance: a row's result does not
// depend on the other rows (tests/model/batch_forward_test.cc).
// Clone copies a KvCache and truncates it (prefix reuse). States persist as
// KvCache's own file format (Serialize / Parse: versioned, CRC32C), under the
// identity of engine_identity.h.
// Thread safety: called from the batcher thread only; SerializeState and
// ParseState from any thread (the prefix cache's writer).
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "common/model/engine.h"
#include "services/inferd/sequence_model.h"

namespace moe::peer {
class PeerNode;
}

namespace moe::inferd {

class EngineModel final : public SequenceModel {
 public:
  ~EngineModel() override;
  static absl::StatusOr<std::unique_ptr<EngineModel>> Open(const std::string& model_dir, const EngineConfig& cfg,
                                                           int64_t max_context);

  std::string name() const override { return name_; }
  int32_t vocab_size() const override { return static_cast<int32_t>(engine_->config().vocab_size); }
  int64_t max_context() const override { return max_context_; }
  std::unique_ptr<SeqState> NewState() override;
  absl::StatusOr<std::unique_ptr<SeqState>> Clone(const SeqState& state, int64_t n) override;
  absl::Status Forward(std::span<Item> items) override;
  // Computed on the first call (an HF checkpoint's weights are read once for it).
  absl::StatusOr<std::string> StateIdentity() const override;
  // Its weights part (engine_identity.h), computed once and shared with StateIdentity.
  absl::StatusOr<std::string> WeightsIdentity() const;
  absl::StatusOr<std::string> SerializeState(const SeqState& state) const override;
  absl::StatusOr<std::unique_ptr<SeqState>> ParseState(std::string_view bytes,
                                                       const std::string& label) const override;
  double expert_hit_rate() const override;
  int64_t expert_fetches() const override;
  // The expert source's health (RemoteExpertSource: expertd's session; thread-safe).
  absl::Status Health() override { return engine_->expert_source().Health(); }
  int64_t kv_budget_bytes() const override { return kv_budget_; }
  // The plan's KV per token, plus the MTP drafter's rows when drafts are on (MtpBytesPerToken).
  int64_t kv_bytes_per_token() const override;
  // A serving plan's KV budget for this worker (0: none); see SequenceModel.
  void set_kv_budget(int64_t bytes, int64_t per_token) {
    kv_budget_ = bytes;
    kv_per_token_ = per_token;
  }
  // false: each item of a step runs its own forward (the unfused baseline
  // that benchmarks compare against; same tokens, more weight/expert reads).
  void set_batched_forward(bool on) { batched_forward_ = on; }
  // The engine behind it (benchmarks: its expert source's counters, routing taps).
  Engine& engine() { return *engine_; }
  // Expert parallelism (services/peer): this host's client (already set on
  // the model as its RemoteExperts) and server; torn down before the engine.
  void set_peer_node(std::unique_ptr<peer::PeerNode> node);
  peer::PeerNode* peer_node() const { return peer_.get(); }
  PeerCounters peer_counters() const override;
  // The serving plan's pass bytes (0: no plan, or one older than planned prefill).
  void set_planned_pass_bytes(int64_t b) { planned_pass_bytes_ = b; }
  // The plan's, else kDefaultPrefillPassBytes (common/model/pass_memory.h).
  int64_t default_pass_bytes() const override;
  // Speculation: KvCache::Truncate rolls back; with MTP drafts on (inferd
  // --speculative mtp|auto on a model with an MTP layer) every state keeps an
  // MtpDrafter (common/model/spec_mtp.h) extended over its fed positions.
  bool can_rollback() const override { return true; }
  int64_t pass_rows_for_bytes(int64_t budget_bytes) const override;
  absl::StatusOr<std::unique_ptr<Pass>> BeginPass(std::span<const Item> items) override;
  absl::Status AdvancePass(Pass& pass, int layers) override;
  absl::Status FinishPass(Pass& pass) override;
  absl::Status Truncate(SeqState& state, int64_t n) override;
  bool has_mtp_drafts() const override { return mtp_drafts_; }
  absl::StatusOr<std::vector<int32_t>> DraftMtp(SeqState& state, std::span<const int32_t> tokens, int32_t next,
                                                int k) override;
  int64_t MtpBehind(const SeqState& state) const override;
  // InvalidArgument when the model has no MTP layer.
  absl::Status set_mtp_drafts(bool on) override;

 private:
  std::vector<BatchSeq> ToBatch(std::span<const Item> items) const;
  // After a forward: MTP hidden states and the items' logits from r.
  absl::Status Deliver(std::span<const Item> items, std::span<const BatchSeq> batch, std::span<const int64_t> p0,
                       std::vector<ForwardResult>& r);
  std::unique_ptr<Engine> engine_;
  std::string name_;
  std::string model_dir_;
  EngineConfig cfg_;
  mutable std::once_flag identity_once_, weights_once_;
  mutable absl::StatusOr<std::string> identity_, weights_;
  int64_t max_context_ = 0;
  int64_t kv_budget_ = 0, kv_per_token_ = 0;
  bool batched_forward_ = true;
  int64_t planned_pass_bytes_ = 0;
  bool mtp_drafts_ = false;
  std::unique_ptr<peer::PeerNode> peer_;  // last: destroyed first
};

}  // namespace moe::inferd
