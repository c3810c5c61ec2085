// Engine: one loaded model (HF checkpoint dir), its expert source, and the
// generation / scoring loops used by `moe run`, `moe score` and tests.
//
// Memory plan: resident weights + expert cache budget + KV cache for the
// requested context, in the formats the weights are stored in (an int4
// container of GLM-5 plans ~19 MB per expert, not its bf16 size); Plan()
// computes it from tensor headers before anything is loaded so the CLI can
// print it and refuse a plan that does not fit.
// Thread safety: Generate/Score on distinct caches may run concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/format/model_config.h"
#include "common/model/local_expert_source.h"
#include "common/model/kv_cache.h"
#include "common/model/model.h"
#include "common/sampling/sampler.h"
#include "common/sampling/spec.h"

namespace moe {

struct EngineConfig {
  int64_t expert_budget_bytes = int64_t{1} << 62;  // in-process expert LRU budget
  std::optional<Numerics> numerics;                // default: from config dtype (bf16 -> kHfBf16)
  AttentionPath attention = AttentionPath::kAuto;  // see AttentionPath (model.h)
  KvDtype kv_dtype = KvDtype::kF32;
  IndexKeys index_keys = IndexKeys::kAuto;  // see IndexKeys (kv_cache.h)
  bool load_mtp = true;
  // Re-store weights at load (quality experiments; `moe convert` is the
  // production path): routed experts and/or dense projections.
  std::optional<QFormat> expert_format;
  std::optional<QFormat> dense_format;
  // Path of the integer-format kernels (kAuto: int8-activation IDOT).
  kernels::Path kernel_path = kernels::Path::kAuto;
  // Where routed experts come from. Unset: LocalExpertSource, the LRU over the
  // model's own files (expert_budget_bytes). Set: called once with the opened
  // container (a converted model is required) and the engine fetches every
  // expert through the returned source, e.g. expertd's RemoteExpertSource
  // (`moe run --expertd`). The engine owns the source.
  using ExpertSourceFactory = std::function<absl::StatusOr<std::unique_ptr<ExpertSource>>(const Container&)>;
  ExpertSourceFactory expert_source;
};

struct MemoryPlan {
  int64_t resident_bytes = 0;      // non-expert weights
  int64_t expert_bytes_each = 0;   // one routed expert as stored (largest layer)
  int64_t experts_per_token_bytes = 0;  // num_experts_per_tok experts: one layer's working set
  int64_t expert_total_bytes = 0;  // all routed experts
  int64_t expert_cache_bytes = 0;  // min(budget, total)
  int64_t kv_bytes_per_token = 0;
  bool index_q8 = false;    // index keys at int8 (EngineConfig::index_keys resolved)
  int64_t max_context = 0;  // the model's max_position_embeddings
  std::string ToString() const;
};

// Generate's sampling: the one sampler (common/sampling/sampler.h, what inferd
// draws with) and the sequence's seed (output token i draws from
// KeyedRng(seed, i)). Default: greedy.
struct SamplingParams {
  SampleParams sample{.temperature = 0.0f};
  uint64_t seed = 0;
};

struct GenerateResult {
  std::vector<int32_t> tokens;
  bool stopped_at_eos = false;
  double prefill_seconds = 0, decode_seconds = 0;
  // Expert bytes the source loaded (ExpertSourceStats::bytes_read) in each phase.
  int64_t prefill_expert_bytes = 0, decode_expert_bytes = 0;
  // With a profile set on the model (Model::set_profile): the prefill's and
  // the decode steps' component times, and the expert source's counters at
  // the end of the prefill (decode = final Stats() minus these).
  bool profiled = false;
  StepProfile prefill_profile, decode_profile;
  ExpertSourceStats source_after_prefill;
  // Speculative decoding (SpecOptions): decode steps, drafts and acceptance
  // per draft position. steps counts every decode forward (plain or verify).
  SpecStats spec;
};

// Teacher-forced MTP drafts (vLLM convention: slot j takes the final-normed
// hidden state h_j and ids[j+1] and predicts ids[j+2]) next to the main
// model's own greedy choice at every position (what a draft is accepted by).
struct MtpDrafts {
  std::vector<int32_t> draft;        // ids.size() - 1 slots
  std::vector<int32_t> main_argmax;  // ids.size() positions
};

struct ScoreRow {
  int32_t argmax = 0;
  double argmax_logprob = 0;
  double next_logprob = 0;  // log p(ids[i+1]) (0 for the last row)
};

class Engine {
 public:
  static absl::StatusOr<MemoryPlan> Plan(const std::string& model_dir, const EngineConfig& cfg);
  static absl::StatusOr<std::unique_ptr<Engine>> Open(const std::string& model_dir, const EngineConfig& cfg);

  const Model& model() const { return *model_; }
  Model& mutable_model() { return *model_; }
  const ModelConfig& config() const { return model_->config(); }
  // The in-process source over the model's own files; only valid when
  // EngineConfig::expert_source was unset (see has_local_source()).
  // expert_source() works in both modes.
  LocalExpertSource& local_source() { return *local_; }
  bool has_local_source() const { return local_ != nullptr; }
  ExpertSource& expert_source() { return *source_; }
  // The converted container (nullptr for an HF checkpoint): its records' CRCs name the bytes.
  const Container* container() const { return container_.get(); }
  KvCache NewCache() const { return KvCache::ForModel(config(), cfg_.kv_dtype, /*mtp=*/false, index_q8_); }
  bool index_q8() const { return index_q8_; }

  // Feeds the prompt (continuing `cache`) and generates up to max_tokens,
  // stopping after an EOS id. The cache ends holding prompt + all generated
  // tokens but the last, which is recorded as cache.pending_token().
  // Speculation (`spec`, common/sampling/spec.h; engine_generate.cc): each
  // decode step may verify drafts (n-gram, MTP) in one forward over
  // [last token + drafts] and truncates the cache to what was accepted; the
  // tokens are the same as with spec off (greedy, and seeded: keyed draws),
  // and so is the cache at the end. --speculative mtp on a model without an
  // MTP layer is refused.
  absl::StatusOr<GenerateResult> Generate(std::span<const int32_t> prompt, int64_t max_tokens,
                                          const SamplingParams& sp, KvCache& cache,
                                          const SpecOptions& spec = {}) const;
  // Teacher-forced scoring of ids in one batch (fresh cache).
  absl::StatusOr<std::vector<ScoreRow>> Score(std::span<const int32_t> ids) const;
  // MTP drafts over ids in one batch (fresh caches); needs an MTP layer and >= 2 ids.
  absl::StatusOr<MtpDrafts> TeacherForcedMtpDrafts(std::span<const int32_t> ids) const;

 private:
  EngineConfig cfg_;
  bool index_q8_ = false;
  std::unique_ptr<SafetensorsReader> ck_;
  std::unique_ptr<Container> container_;  // set when model_dir is a converted container
  std::unique_ptr<LocalExpertSource> local_;
  std::unique_ptr<ExpertSource> external_;  // EngineConfig::expert_source's result
  ExpertSource* source_ = nullptr;          // local_ or external_
  std::unique_ptr<Model> model_;
};

}  // namespace moe
