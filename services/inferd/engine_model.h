// SequenceModel over the project's engine (common/model): one moe::Engine
// (resident weights + in-process expert store), one KvCache per sequence.
//
// Forward runs the step's items one after another through Model::Forward
// (each item: its tokens at its cache's next positions, last-row logits).
// The engine has no multi-sequence forward yet, so the decode rows of a step
// are not fused into one matmul per layer; the step structure (chunked
// prefill interleaved with decode, cancellation between steps, prefix reuse)
// is the batcher's and does not change when a fused forward lands here.
// Batch invariance holds: every item is computed on its own.
// Clone copies a KvCache and truncates it (prefix reuse).
// Thread safety: called from the batcher thread only.
#pragma once

#include <memory>
#include <string>

#include "common/model/engine.h"
#include "services/inferd/sequence_model.h"

namespace moe::inferd {

class EngineModel final : public SequenceModel {
 public:
  static absl::StatusOr<std::unique_ptr<EngineModel>> Open(const std::string& model_dir, const EngineConfig& cfg,
                                                           int64_t max_context);

  std::string name() const override { return name_; }
  int32_t vocab_size() const override { return static_cast<int32_t>(engine_->config().vocab_size); }
  int64_t max_context() const override { return max_context_; }
  std::unique_ptr<SeqState> NewState() override;
  absl::StatusOr<std::unique_ptr<SeqState>> Clone(const SeqState& state, int64_t n) override;
  absl::Status Forward(std::span<Item> items) override;
  double expert_hit_rate() const override;

 private:
  std::unique_ptr<Engine> engine_;
  std::string name_;
  int64_t max_context_ = 0;
};

}  // namespace moe::inferd
