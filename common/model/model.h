// The forward pass of glm_moe_dsa (GLM-5.x) and deepseek_v3 (docs/MODEL.md
// section 4), plus the MTP draft layer (section 5).
//
// Numerics: Numerics::kHfBf16 reproduces Hugging Face's eager BF16 path
// (every op's output rounded to bf16 where HF's is a bf16 tensor; router,
// indexer weights/scores and softmax in f32; RoPE with bf16 cos/sin; expert
// outputs accumulated in bf16 in ascending expert id). Numerics::kF32 keeps
// every activation in f32. Both are batch-invariant: a row's result does not
// depend on the other rows of the batch (Linear's contract), so scoring S
// tokens at once equals S single-token steps bit for bit.
//
// Attention paths: kExplicit expands the cached latents with kv_b (HF's form,
// bit-compatible with it); kAbsorbed folds kv_b into the query/output
// (vLLM/reference decode form; cost independent of the head expansion).
// Both read the same compressed cache.
//
// Experts: every MoE layer fetches each distinct routed expert of the batch
// exactly once from the ExpertSource (Hint first, then Get), applies it to
// every row that routed to it, and releases the lease before the next layer.
// Thread safety: a Model is immutable; Forward on distinct caches may run
// concurrently if the ExpertSource allows it.
// Files: model.cc (numerics helpers, decoder layer, Forward/ForwardBatch),
// attention.cc, dsa_indexer.cc, moe_routing.cc, router_lookahead.cc, mtp.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <memory>
#include <string>
#include <span>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "common/format/model_config.h"
#include "common/kernels/kernels.h"
#include "common/model/bf16.h"
#include "common/expert_source/expert_source.h"
#include "common/expert_source/remote_experts.h"
#include "common/model/kv_cache.h"
#include "common/model/weights.h"

namespace moe {

enum class Numerics { kHfBf16, kF32 };
// kExplicit: HF's form (expand the attended latents with kv_b; HF-exact with
// unquantized weights). kAbsorbed: kv_b folded into the query and output
// (the latents are never expanded: at GLM-5's shapes 5-29x faster decode and
// 3x faster prefill, docs/BENCHMARKS.md), different rounding points.
// kAuto: absorbed when kv_b is integer-quantized (no HF-exactness is claimed
// for quantized weights), explicit otherwise; resolved when the Model is
// built (per model, never per batch: batch invariance holds on either path).
enum class AttentionPath { kExplicit, kAbsorbed, kAuto };
AttentionPath ResolveAttention(AttentionPath requested, const ModelWeights& weights);
std::string_view AttentionPathName(AttentionPath path);

// How a Model computes (fixed when it is built). The Engine fills it from
// EngineConfig (engine.h), which also says what to load and where experts
// come from.
struct ModelOptions {
  Numerics numerics = Numerics::kHfBf16;
  AttentionPath attention = AttentionPath::kExplicit;
  // Integer-format (quantized) matrices run on common/kernels with this
  // path (kAuto = the kernels' default: int8-activation IDOT); f32/bf16
  // matrices always use the reference Linear (HF-exact accumulation).
  bool use_kernels = true;
  kernels::Path kernel_path = kernels::Path::kAuto;
  int kernel_threads = 0;
};

// Where forward time goes: wall seconds per component, summed over every
// Forward / ForwardBatch while the profile is set (Model::set_profile). The
// components partition the forward (what none of them covers - norms,
// residual adds, RoPE of cached keys, bookkeeping - is `Other()`).
// expert_fetch is the time the MoE block waited in ExpertSource::GetEach
// (its wall time minus the expert compute done as leases arrive; its split
// into disk wait and IPC comes from ExpertSourceStats).
struct StepProfile {
  double embed = 0;           // embedding rows
  double attention = 0;       // MLA projections, cache appends, o_proj (the indexer and the core excluded)
  double attention_core = 0;  // over the cached keys: gather, q_lat, scores, softmax, ctx, W_UV
  double indexer = 0;         // DSA lightning indexer (projections, key cache, scoring, top-k)
  double router = 0;          // router logits, top-k routing, the next layer's look-ahead
  double shared_expert = 0;
  double dense_mlp = 0;       // dense layers' MLP
  double routed_experts = 0;  // routed expert compute (fetch excluded)
  double expert_fetch = 0;    // waiting for routed experts (ExpertSource::GetEach)
  double lm_head = 0;         // final norm + LM head
  int64_t indexer_scored_rows = 0;  // rows whose keys the indexer scored (more cached keys than index_topk)
  double total = 0;           // whole forwards
  int64_t forwards = 0, rows = 0;
  double Other() const {
    return total - (embed + attention + attention_core + indexer + router + shared_expert + dense_mlp + routed_experts +
                    expert_fetch + lm_head);
  }
};

struct ForwardResult {
  int64_t rows = 0;            // rows returned (all S, or the last one)
  std::vector<float> logits;   // rows x vocab
  std::vector<float> hidden;   // rows x hidden, final-normed (MTP input); every row with BatchSeq::all_hidden
};

// One sequence's part of a batched forward (Model::ForwardBatch): its new
// tokens, its own KV cache (positions continue at cache->length()), and which
// rows need logits.
struct BatchSeq {
  std::span<const int32_t> ids;
  KvCache* cache = nullptr;
  bool all_rows = false;  // logits of every row, else of the last row only
  bool logits = true;     // false: no logits/hidden at all (a prefill chunk that ends no prompt)
  // Final-normed hidden states of EVERY row (ForwardResult::hidden, ids.size()
  // rows) whatever all_rows / logits say: what the MTP drafter extends its
  // cache with (common/model/spec_mtp.h). The LM head still runs only on the
  // rows all_rows / logits ask for.
  bool all_hidden = false;
  // Prompt rows (a prefill chunk or pass): routed experts that only such rows
  // use are fetched with FetchUse::kPrefill (no eviction of the decode
  // working set). Never changes a result.
  bool prefill = false;
};

// A ForwardBatch run a few decoder layers at a time: the layer-major prefill
// of docs/SERVING.md ("Planned prefill"). Model::BeginPass validates and
// embeds, Model::AdvancePass runs the next layers, Model::FinishPass returns
// exactly what ForwardBatch(seqs) returns (ForwardBatch is these three
// calls). Between calls the pass's caches hold its rows in the layers run so
// far only: nothing else may use them until FinishPass (or, to abandon the
// pass, KvCache::Truncate back to their old lengths); other caches may be run
// through other forwards meanwhile. Holds copies of the token ids and the
// rows' hidden states (hidden_size floats per row).
class ForwardPass {
 public:
  ForwardPass();
  ~ForwardPass();
  ForwardPass(const ForwardPass&) = delete;
  ForwardPass& operator=(const ForwardPass&) = delete;
  int next_layer() const;  // decoder layers done
  bool layers_done() const;

 private:
  friend class Model;
  struct State;
  std::unique_ptr<State> s_;
};

struct MtpResult {
  int64_t rows = 0;
  std::vector<float> logits;  // rows x vocab (the last row alone with MtpForward's last_logits_only)
  std::vector<float> out;     // rows x hidden, decoder-layer output before shared_head.norm
};

class Model {
 public:
  Model(ModelConfig config, std::unique_ptr<ModelWeights> weights, ExpertSource* experts, ModelOptions opt);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return *weights_; }
  const ModelOptions& options() const { return opt_; }
  bool has_mtp() const { return weights_->mtp != nullptr; }

  // Debug tap: called with intermediate tensors (names as the oracle's
  // debug.safetensors: "embed", "layers.L.attn_norm", "layers.L.attn.q", ...).
  using TraceFn = std::function<void(const std::string& name, const float* data, int64_t n)>;
  void set_trace(TraceFn fn) { trace_ = std::move(fn); }
  // Routing tap (`moe run --record-routing`): called for every row of every
  // MoE layer (the MTP layer is num_hidden_layers) with the row's position in
  // its cache and its top-k expert ids in selection order. Set before Forward.
  using RouteFn = std::function<void(int layer, int64_t position, std::span<const int> experts)>;
  void set_route_tap(RouteFn fn) { route_tap_ = std::move(fn); }
  // Look-ahead tap (`moe run --record-routing` too): at every MoE layer
  // followed by another, called for every row with the next layer's
  // predicted top-k (its router on this layer's MLP input), for prefill
  // chunks as well, which send no look-ahead hint.
  void set_lookahead_tap(RouteFn fn) { lookahead_tap_ = std::move(fn); }
  // Profile tap: every Forward adds its component times to *p (nullptr: off).
  // Not for concurrent forwards on one Model (the sums are not atomic).
  void set_profile(StepProfile* p) { profile_ = p; }
  StepProfile* profile() const { return profile_; }
  // Expert parallelism across hosts (common/expert_source/remote_experts.h):
  // the routed experts `remote` says run elsewhere are computed there, with
  // this host's source as the fallback; nullptr: all here. Not owned; set
  // before Forward, not during one.
  void set_remote_experts(RemoteExperts* remote) { remote_ = remote; }
  // The source this host's routed experts come from (the owner's side streams them: FetchExpert).
  ExpertSource& expert_source() const { return *experts_; }
  // The owner's side (services/peer): R(expert(x)) of each job's rows of
  // x [n_rows, H], from this model's expert source, computed exactly as Moe
  // computes them; outputs[j] is [jobs[j].rows.size(), H]. InvalidArgument
  // for a layer without routed experts, an expert or row out of range.
  absl::Status RunExperts(int layer, const float* x, int64_t n_rows, std::span<const RemoteExpertJob> jobs,
                          std::vector<std::vector<float>>& outputs) const;
  // OK when (layer, expert) is a routed expert of this model (an MoE layer or
  // the MTP layer); InvalidArgument naming which part is out of range.
  absl::Status CheckRoutedExpert(int layer, int expert) const;

  // Runs `ids` at positions cache.length() ... and appends them to `cache`.
  // Returns logits (and final-normed hidden states) of every row when
  // `all_rows`, else of the last row only. Errors: empty input, id outside
  // the vocabulary, positions beyond max_position_embeddings, expert fetch.
  absl::StatusOr<ForwardResult> Forward(std::span<const int32_t> ids, KvCache& cache, bool all_rows) const;

  // Continuous batching: ONE forward over the rows of several sequences
  // (decode rows and prefill chunks alike), each appended to its own cache at
  // its own positions. Every dense/attention projection, router and the LM
  // head run once over all rows; attention runs per sequence on its cache;
  // each distinct routed expert of a layer is fetched once for the whole
  // batch and applied to every row routed to it. Result i belongs to seqs[i]
  // (rows = 0 when !seqs[i].logits). Batch invariance: result i is bit-
  // identical to Forward(seqs[i].ids, *seqs[i].cache, all_rows) alone.
  // Errors (checked for every sequence before any cache is touched): empty
  // ids, null or repeated cache, cache of another model, id outside the
  // vocabulary, positions past max_position_embeddings (message names the
  // sequence index); expert fetch errors fail the whole batch.
  absl::StatusOr<std::vector<ForwardResult>> ForwardBatch(std::span<const BatchSeq> seqs) const;
  // ForwardBatch in steps (ForwardPass above). BeginPass: the same checks,
  // then the embedding; AdvancePass: up to `layers` more decoder layers
  // (>= 1); FinishPass: after every layer, the final norm and LM head
  // (FailedPrecondition before). An error leaves the pass unusable.
  absl::StatusOr<std::unique_ptr<ForwardPass>> BeginPass(std::span<const BatchSeq> seqs) const;
  absl::Status AdvancePass(ForwardPass& pass, int layers) const;
  absl::StatusOr<std::vector<ForwardResult>> FinishPass(ForwardPass& pass) const;

  // MTP layer over slots: row j takes hidden[j] (main model's final-normed
  // hidden state, or a previous MTP `out` for recursive drafts) and
  // next_ids[j], at positions mtp_cache.length() + j.
  // index_share_for_mtp_iteration (MODEL_SPEC section 5): `share` set makes
  // every row select share->keys plus the positions after share->pos instead
  // of scoring its keys (the MTP layer's own step-0 top-k, reused by the later
  // draft steps of a round); `topk_out` (optional) receives the last row's
  // selected keys and position (what a round's step 0 passes on).
  // last_logits_only: the LM head runs on the last row alone (MtpResult::logits
  // holds one row): a drafter's catch-up over the slots it skipped needs only
  // the last slot's draft, and at GLM-5's 154,880 x 6,144 head a row costs
  // ~0.95 G multiply-adds.
  struct IndexShare {
    std::vector<int32_t> keys;
    int64_t pos = -1;
  };
  absl::StatusOr<MtpResult> MtpForward(std::span<const float> hidden, std::span<const int32_t> next_ids,
                                       KvCache& mtp_cache, const IndexShare* share = nullptr,
                                       IndexShare* topk_out = nullptr, bool last_logits_only = false) const;

 private:
  struct TopK;
  struct Seg;  // one sequence's rows [row0, row0 + S) of a batch, its cache and DSA top-k state
  friend struct ForwardPass::State;
  // S = total rows of all segments.
  absl::Status DecoderLayer(const LayerWeights& lw, int layer_id, float* h, int64_t S, std::span<Seg> segs,
                            int cache_layer) const;
  void Attention(const LayerWeights& lw, const float* a, int64_t S, std::span<Seg> segs, int cache_layer,
                 float* out) const;
  // The cached rows a segment's queries attend (DSA: the union of its rows'
  // top-k positions, else every position), read as f32 (model_internal.h).
  struct Attended;
  Attended GatherAttended(const Seg& seg, int64_t P0, int cache_layer, bool trace, const std::string& tp) const;
  // HF's explicit attention core over one segment's rows (q: its rows of the
  // projected queries; attn: its rows of the attention output).
  void AttendExplicit(const LayerWeights& lw, const float* q, const Seg& seg, int64_t P0, int cache_layer, bool trace,
                      float* attn) const;
  // The absorbed core over every row of the batch (q, attn: all S rows).
  void AttendAbsorbed(const LayerWeights& lw, const float* q, int64_t S, std::span<Seg> segs,
                      std::span<const int64_t> P0s, int cache_layer, float* attn) const;
  void Indexer(const LayerWeights& lw, const float* a, const float* cq, int64_t S, std::span<Seg> segs,
               std::span<const int64_t> P0s, int cache_layer) const;
  // One row's indexer scores of its n_causal keys from int8 index keys (KvCache::index_q8).
  void ScoreQ8(const float* q_row, const float* w_row, const KvCache& cache, int cache_layer, int64_t n_causal,
               std::vector<float>& dots, float* score) const;
  // pos[s]: sequence position of row s (the route tap reports it).
  // prefill[s] != 0: row s is a prompt row (empty: all decode); experts only
  // prompt rows use are fetched with FetchUse::kPrefill.
  absl::Status Moe(const LayerWeights& lw, int layer_id, const float* x, int64_t S, std::span<const int64_t> pos,
                   std::span<const uint8_t> prefill,
                   float* out) const;
  // R(expert(x)) for `rows` of x (H wide) into y [rows.size(), H]: the one
  // routed-expert computation (Moe's and RunExperts').
  absl::Status ExpertRows(const ExpertKey& key, const ExpertWeights& ew, const float* x, std::span<const int64_t> rows,
                          float* y) const;
  // Top-k routed experts of one row's router logits (sc: sigmoid scores, E).
  std::vector<int> Route(const LayerWeights& lw, const float* logits, float* sc) const;
  // Sends HintAhead for the next MoE layer's predicted experts (batches of at
  // most kLookAheadMaxRows rows: decode steps of up to 64 sequences and
  // verify batches; prefill chunks are longer and need every expert anyway).
  // pos: the rows' positions for the look-ahead tap (null: no tap).
  void LookAhead(int layer_id, const float* a, int64_t S, const int64_t* pos = nullptr) const;
  static constexpr int64_t kLookAheadMaxRows = 64;

 public:
  // The keys a look-ahead hints: the union of the rows' predicted experts of
  // layer `next`, in expert order; empty when it covers more than half of
  // the layer's experts (reading most of a layer ahead of demand only
  // competes with the demand reads: nothing to gain from a prediction).
  static std::vector<ExpertKey> LookAheadKeys(int next, const std::vector<std::vector<int>>& rows, int num_experts);

 private:
  void Mlp(const OwnedMatrix& g, const OwnedMatrix& u, const OwnedMatrix& d, const float* x, int64_t S,
           float* out) const;
  void RmsNorm(const float* x, int64_t S, int64_t n, const std::vector<float>& w, double eps, float* out) const;
  void LinearR(const OwnedMatrix& w, const float* x, int64_t S, float* y) const;
  // The single matmul call site: kernels for integer formats, Linear otherwise.
  void Mm(const WeightMatrix& w, const float* x, int64_t S, float* y) const;
  // fn(i) once for every i in [0, n): on the kernels' thread pool when
  // `worth` (the engine's one team of threads, shared with the matmuls), on
  // the calling thread otherwise or without kernels. fn must not call Mm or
  // Parallel (the pool is not re-entrant; calls are serialized by kernels_mu_).
  void Parallel(int64_t n, bool worth, absl::FunctionRef<void(int64_t)> fn) const;
  void Rope(float* x, int64_t pos, bool interleaved) const;
  // HF's bf16 rounding point under kHfBf16 numerics (inline: the attention
  // cores call it per score).
  float R(float v) const { return opt_.numerics == Numerics::kHfBf16 ? RoundBF16(v) : v; }
  void RoundAll(float* x, int64_t n) const;

  ModelConfig config_;
  std::unique_ptr<ModelWeights> weights_;
  ExpertSource* experts_;
  RemoteExperts* remote_ = nullptr;
  ModelOptions opt_;
  TraceFn trace_;
  RouteFn route_tap_, lookahead_tap_;
  StepProfile* profile_ = nullptr;
  // Adds the seconds since construction to profile_->*field (if profiling).
  class Timed;
  std::unique_ptr<kernels::Kernels> kernels_;  // calls serialized by kernels_mu_
  mutable std::mutex kernels_mu_;
  void Trace(const std::string& name, const float* d, int64_t n) const {
    if (trace_) trace_(name, d, n);
  }
};

// Index of the largest logit (first on ties, like torch.argmax).
int32_t Argmax(const float* logits, int64_t n);
// log_softmax(logits)[id], computed in double.
double LogProb(const float* logits, int64_t n, int32_t id);

}  // namespace moe
