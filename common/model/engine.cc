#include "common/model/engine.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <unordered_map>

#include "common/base/status.h"

namespace moe {
std::string MemoryPlan::ToString() const {
  auto mib = [](int64_t b) { return absl::StrCat(b / (1 << 20), " MiB (", b, " B)"); };
  return absl::StrCat("memory plan: resident weights ", mib(resident_bytes), "; experts total ",
                      mib(expert_total_bytes), " (", expert_bytes_each, " B each); expert cache ",
                      mib(expert_cache_bytes), "; KV ", kv_bytes_per_token, " B/token");
}

namespace {

// One plan for both sources: resident bytes from walking the loader, expert
// bytes per MoE layer from the stored (or re-stored) formats.
// Whether the loaded kv_b will be integer-quantized (stored so in a
// container, or re-stored at load with an integer --dense-format).
bool IntegerKvB(const Container& ck, const EngineConfig& cfg) {
  if (cfg.dense_format) return Info(*cfg.dense_format).integer;
  const ContainerTensor* t = ck.Find("model.layers.0.self_attn.kv_b_proj.weight");
  return t != nullptr && Info(t->format).integer;
}
bool IntegerKvB(const SafetensorsReader&, const EngineConfig& cfg) {
  return cfg.dense_format && Info(*cfg.dense_format).integer;
}

template <class Src>
absl::StatusOr<MemoryPlan> PlanFrom(const Src& ck, const ModelConfig& c, const EngineConfig& cfg) {
  MemoryPlan p;
  LoadOptions lo;
  lo.load_mtp = cfg.load_mtp;
  bool has_mtp = false;
  MOE_ASSIGN_OR_RETURN(p.resident_bytes, PlanResidentBytes(ck, c, lo, cfg.dense_format, &has_mtp));
  for (int l = 0; l <= c.num_hidden_layers; ++l) {  // layer L is the MTP layer (MoE)
    if (l == c.num_hidden_layers ? !has_mtp : !c.layer_is_moe[l]) continue;
    MOE_ASSIGN_OR_RETURN(int64_t each, PlanExpertBytes(ck, c, l, cfg.expert_format));
    p.expert_bytes_each = std::max(p.expert_bytes_each, each);
    p.expert_total_bytes += each * c.n_routed_experts;
  }
  p.experts_per_token_bytes = p.expert_bytes_each * c.num_experts_per_tok;
  p.expert_cache_bytes = std::min(cfg.expert_budget_bytes, p.expert_total_bytes);
  p.index_q8 = c.has_indexer && IndexKeysQ8(cfg.index_keys, IntegerKvB(ck, cfg));
  p.kv_bytes_per_token = KvBytesPerToken(c, cfg.kv_dtype, p.index_q8);
  p.max_context = c.max_position_embeddings;
  return p;
}

bool IsContainer(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::exists(std::filesystem::path(dir) / std::string(kManifestFileName), ec);
}

}  // namespace

absl::StatusOr<MemoryPlan> Engine::Plan(const std::string& model_dir, const EngineConfig& cfg) {
  MOE_ASSIGN_OR_RETURN(ModelConfig c, LoadModelConfig(model_dir));
  if (IsContainer(model_dir)) {
    MOE_ASSIGN_OR_RETURN(std::unique_ptr<Container> ct, Container::Open(model_dir));
    return PlanFrom(*ct, c, cfg);
  }
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsReader> ck, OpenCheckpoint(model_dir));
  return PlanFrom(*ck, c, cfg);
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Open(const std::string& model_dir, const EngineConfig& cfg) {
  std::unique_ptr<Engine> e(new Engine());
  e->cfg_ = cfg;
  MOE_ASSIGN_OR_RETURN(ModelConfig c, LoadModelConfig(model_dir));
  LoadOptions lo;
  lo.load_mtp = cfg.load_mtp;
  ExpertLoader load_expert;
  std::unique_ptr<ModelWeights> weights;
  const ModelConfig cc = c;
  if (IsContainer(model_dir)) {
    // Converted container: matrices keep their stored QFormat.
    MOE_ASSIGN_OR_RETURN(e->container_, Container::Open(model_dir));
    MOE_ASSIGN_OR_RETURN(weights, LoadResidentWeights(*e->container_, c, lo));
    MOE_RETURN_IF_ERROR(ValidateExperts(*e->container_, c, weights->mtp != nullptr));
    const Container* ct = e->container_.get();
    load_expert = [ct](int layer, int expert) { return LoadExpertFromContainer(*ct, layer, expert); };
  } else {
    MOE_ASSIGN_OR_RETURN(e->ck_, OpenCheckpoint(model_dir));
    MOE_ASSIGN_OR_RETURN(weights, LoadResidentWeights(*e->ck_, c, lo));
    MOE_RETURN_IF_ERROR(ValidateExperts(*e->ck_, c, weights->mtp != nullptr));
    const SafetensorsReader* ck = e->ck_.get();
    load_expert = [ck, cc](int layer, int expert) { return LoadExpertFromCheckpoint(*ck, cc, layer, expert); };
  }
  if (cfg.dense_format) MOE_RETURN_IF_ERROR(RequantizeDense(*weights, *cfg.dense_format));
  // The same rule as --attention auto: int8 index keys where kv_b is integer.
  e->index_q8_ = c.has_indexer && IndexKeysQ8(cfg.index_keys, ResolveAttention(AttentionPath::kAuto, *weights) ==
                                                                  AttentionPath::kAbsorbed);
  if (cfg.expert_source) {
    if (!e->container_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "an external expert source (expertd) needs a converted container (moe convert); ", model_dir,
          " is an HF checkpoint"));
    }
    if (cfg.expert_format) {
      return absl::InvalidArgumentError("re-storing experts at load is not possible with an external expert source");
    }
    MOE_ASSIGN_OR_RETURN(e->external_, cfg.expert_source(*e->container_));
    e->source_ = e->external_.get();
  } else {
    e->local_ = std::make_unique<LocalExpertSource>(
        [load_expert, fmt = cfg.expert_format](int layer, int expert) -> absl::StatusOr<OwnedExpert> {
          MOE_ASSIGN_OR_RETURN(OwnedExpert x, load_expert(layer, expert));
          if (fmt) {
            for (OwnedMatrix* m : {&x.gate, &x.up, &x.down}) MOE_RETURN_IF_ERROR(Requantize(*m, *fmt, "expert"));
          }
          return x;
        },
        cfg.expert_budget_bytes);
    e->source_ = e->local_.get();
  }
  ModelOptions opt;
  opt.numerics = cfg.numerics.value_or(c.dtype == "float32" ? Numerics::kF32 : Numerics::kHfBf16);
  opt.attention = cfg.attention;
  opt.kernel_path = cfg.kernel_path;
  e->model_ = std::make_unique<Model>(std::move(c), std::move(weights), e->source_, opt);
  return e;
}

absl::StatusOr<std::vector<ScoreRow>> Engine::Score(std::span<const int32_t> ids) const {
  KvCache cache = NewCache();
  MOE_ASSIGN_OR_RETURN(ForwardResult f, model_->Forward(ids, cache, /*all_rows=*/true));
  const int64_t V = config().vocab_size;
  std::vector<ScoreRow> rows(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const float* lg = f.logits.data() + i * V;
    rows[i].argmax = Argmax(lg, V);
    rows[i].argmax_logprob = LogProb(lg, V, rows[i].argmax);
    rows[i].next_logprob = i + 1 < ids.size() ? LogProb(lg, V, ids[i + 1]) : 0.0;
  }
  return rows;
}

absl::StatusOr<MtpDrafts> Engine::TeacherForcedMtpDrafts(std::span<const int32_t> ids) const {
  if (!model_->has_mtp()) return absl::FailedPreconditionError("the model has no MTP layer");
  if (ids.size() < 2) return absl::InvalidArgumentError("MTP drafts need at least 2 ids");
  const ModelConfig& c = config();
  KvCache cache = NewCache();
  KvCache mtp = KvCache::ForModel(c, KvDtype::kF32, /*mtp=*/true, index_q8_);
  MOE_ASSIGN_OR_RETURN(ForwardResult f, model_->Forward(ids, cache, /*all_rows=*/true));
  const size_t n = ids.size() - 1;
  MOE_ASSIGN_OR_RETURN(MtpResult m, model_->MtpForward(std::span<const float>(f.hidden).first(n * c.hidden_size),
                                                        ids.subspan(1), mtp));
  MtpDrafts out;
  for (size_t j = 0; j < n; ++j) out.draft.push_back(Argmax(m.logits.data() + j * c.vocab_size, c.vocab_size));
  for (size_t j = 0; j < ids.size(); ++j)
    out.main_argmax.push_back(Argmax(f.logits.data() + j * c.vocab_size, c.vocab_size));
  return out;
}

}  // namespace moe
