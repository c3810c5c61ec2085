#include "common/model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "common/base/log.h"
#include "common/base/status.h"
#include "common/model/bf16.h"
#include "common/model/linear.h"
#include "common/model/model_internal.h"

namespace moe {

using model_detail::Silu;

int32_t Argmax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

double LogProb(const float* logits, int64_t n, int32_t id) {
  double m = logits[0];
  for (int64_t i = 1; i < n; ++i) m = std::max(m, static_cast<double>(logits[i]));
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(logits[i]) - m);
  return static_cast<double>(logits[id]) - m - std::log(s);
}

AttentionPath ResolveAttention(AttentionPath requested, const ModelWeights& weights) {
  if (requested != AttentionPath::kAuto) return requested;
  for (const LayerWeights& l : weights.layers) {
    if (Info(l.kv_b.m.format).integer) return AttentionPath::kAbsorbed;
  }
  return AttentionPath::kExplicit;
}

std::string_view AttentionPathName(AttentionPath path) {
  switch (path) {
    case AttentionPath::kExplicit:
      return "explicit";
    case AttentionPath::kAbsorbed:
      return "absorbed";
    case AttentionPath::kAuto:
      break;
  }
  return "auto";
}

Model::Model(ModelConfig config, std::unique_ptr<ModelWeights> weights, ExpertSource* experts, ModelOptions opt)
    : config_(std::move(config)), weights_(std::move(weights)), experts_(experts), opt_(opt) {
  opt_.attention = ResolveAttention(opt_.attention, *weights_);
  if (opt_.use_kernels) {
    kernels::KernelConfig kc;
    kc.path = opt_.kernel_path;
    kc.threads = opt_.kernel_threads;
    auto k = kernels::Kernels::Create(kc);
    if (k.ok()) {
      kernels_ = std::move(*k);
    } else {
      MOE_LOG(WARNING) << "kernels unavailable, using the reference matmul: " << k.status().message();
    }
  }
}

void Model::Mm(const WeightMatrix& w, const float* x, int64_t S, float* y) const {
  if (kernels_ && Info(w.format).integer) {
    kernels::QMatrix q{w.format, w.rows, w.cols, w.data, w.scales};
    std::lock_guard<std::mutex> lock(kernels_mu_);
    const absl::Status st = kernels_->Matmul(q, x, S, y);
    if (st.ok()) return;
    MOE_LOG(WARNING) << "kernel matmul failed, using the reference: " << st.message();
  }
  Linear(w, x, S, y, [this](int64_t n, absl::FunctionRef<void(int64_t)> body) { Parallel(n, true, body); });
}

void Model::Parallel(int64_t n, bool worth, absl::FunctionRef<void(int64_t)> fn) const {
  if (kernels_ && worth && n > 1) {
    std::lock_guard<std::mutex> lock(kernels_mu_);
    kernels_->ParallelFor(n, fn);
    return;
  }
  SerialFor(n, fn);
}

void Model::RoundAll(float* x, int64_t n) const {
  if (opt_.numerics != Numerics::kHfBf16) return;
  for (int64_t i = 0; i < n; ++i) x[i] = RoundBF16(x[i]);
}

void Model::LinearR(const OwnedMatrix& w, const float* x, int64_t S, float* y) const {
  Mm(w.m, x, S, y);
  RoundAll(y, S * w.m.rows);
}

// HF RMSNorm: f32 normalize, cast to the activation dtype, times the weight.
void Model::RmsNorm(const float* x, int64_t S, int64_t n, const std::vector<float>& w, double eps, float* out) const {
  for (int64_t s = 0; s < S; ++s) {
    const float* xi = x + s * n;
    float* yo = out + s * n;
    float ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += xi[i] * xi[i];
    const float var = ss / static_cast<float>(n);
    const float r = 1.0f / std::sqrt(var + static_cast<float>(eps));
    for (int64_t i = 0; i < n; ++i) yo[i] = R(w[i] * R(xi[i] * r));
  }
}

// RoPE on qk_rope_head_dim values at x. Output layout (both modes):
// [rotated first-of-pair (half) | rotated second-of-pair (half)], as HF.
void Model::Rope(float* x, int64_t pos, bool interleaved) const {
  const int64_t d = config_.qk_rope_head_dim, half = d / 2;
  float tmp[1024];
  float* t = d <= 1024 ? tmp : new float[d];
  for (int64_t i = 0; i < half; ++i) {
    const float ang = static_cast<float>(pos) * config_.rope_inv_freq[i];
    // cos/sin of the f32 angle, correctly rounded to f32 (as torch), then bf16.
    const float c = R(static_cast<float>(std::cos(static_cast<double>(ang))) * config_.rope_attention_factor);
    const float s = R(static_cast<float>(std::sin(static_cast<double>(ang))) * config_.rope_attention_factor);
    const float x1 = interleaved ? x[2 * i] : x[i];
    const float x2 = interleaved ? x[2 * i + 1] : x[i + half];
    t[i] = R(R(x1 * c) - R(x2 * s));
    t[i + half] = R(R(x2 * c) + R(x1 * s));
  }
  std::memcpy(x, t, d * sizeof(float));
  if (t != tmp) delete[] t;
}

void Model::Mlp(const OwnedMatrix& g, const OwnedMatrix& u, const OwnedMatrix& d, const float* x, int64_t S,
                float* out) const {
  const int64_t I = g.m.rows;
  std::vector<float> gv(S * I), uv(S * I);
  LinearR(g, x, S, gv.data());
  LinearR(u, x, S, uv.data());
  for (int64_t i = 0; i < S * I; ++i) gv[i] = R(R(Silu(gv[i])) * uv[i]);
  LinearR(d, gv.data(), S, out);
}

absl::Status Model::DecoderLayer(const LayerWeights& lw, int layer_id, float* h, int64_t S, std::span<Seg> segs,
                                 int cache_layer) const {
  const int64_t H = config_.hidden_size;
  std::vector<float> a(S * H), o(S * H);
  const std::string tp = absl::StrCat("layers.", lw.index, ".");
  Trace(tp + "input", h, S * H);
  RmsNorm(h, S, H, lw.input_norm, config_.rms_norm_eps, a.data());
  Trace(tp + "attn_norm", a.data(), S * H);
  Attention(lw, a.data(), S, segs, cache_layer, o.data());
  for (int64_t i = 0; i < S * H; ++i) h[i] = R(h[i] + o[i]);
  RmsNorm(h, S, H, lw.post_norm, config_.rms_norm_eps, a.data());
  Trace(tp + "mlp_norm", a.data(), S * H);
  if (lw.moe) {
    // This layer's attention already appended each sequence's rows to its cache.
    std::vector<int64_t> pos(S);
    std::vector<uint8_t> prefill(S, 0);
    for (const Seg& sg : segs) {
      const int64_t p0 = sg.cache->length(cache_layer) - sg.S;
      for (int64_t i = 0; i < sg.S; ++i) {
        pos[sg.row0 + i] = p0 + i;
        prefill[sg.row0 + i] = sg.prefill;
      }
    }
    MOE_RETURN_IF_ERROR(Moe(lw, layer_id, a.data(), S, pos, prefill, o.data()));
  } else {
    {
      Timed t(*this, &StepProfile::router);
      LookAhead(layer_id, a.data(), S);
    }
    Timed t(*this, &StepProfile::dense_mlp);
    Mlp(lw.gate, lw.up, lw.down, a.data(), S, o.data());
  }
  Trace(tp + "mlp.out", o.data(), S * H);
  for (int64_t i = 0; i < S * H; ++i) h[i] = R(h[i] + o[i]);
  Trace(tp + "output", h, S * H);
  return absl::OkStatus();
}

absl::StatusOr<ForwardResult> Model::Forward(std::span<const int32_t> ids, KvCache& cache, bool all_rows) const {
  const BatchSeq one{ids, &cache, all_rows, true};
  MOE_ASSIGN_OR_RETURN(std::vector<ForwardResult> r, ForwardBatch(std::span<const BatchSeq>(&one, 1)));
  return std::move(r[0]);
}

ForwardPass::ForwardPass() : s_(std::make_unique<State>()) {}
ForwardPass::~ForwardPass() = default;
int ForwardPass::next_layer() const { return s_->next_layer; }
bool ForwardPass::layers_done() const { return s_->next_layer >= s_->num_layers; }

absl::StatusOr<std::vector<ForwardResult>> Model::ForwardBatch(std::span<const BatchSeq> seqs) const {
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<ForwardPass> pass, BeginPass(seqs));
  MOE_RETURN_IF_ERROR(AdvancePass(*pass, config_.num_hidden_layers));
  return FinishPass(*pass);
}

absl::StatusOr<std::unique_ptr<ForwardPass>> Model::BeginPass(std::span<const BatchSeq> seqs) const {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size, V = c.vocab_size;
  if (seqs.empty()) return absl::InvalidArgumentError("Forward: no sequences");
  const bool many = seqs.size() > 1;
  auto where = [&](size_t i) { return many ? absl::StrCat(" (batch sequence ", i, ")") : std::string(); };
  auto pass = std::make_unique<ForwardPass>();
  ForwardPass::State& ps = *pass->s_;
  // Validate every sequence before touching any cache.
  std::vector<Seg>& segs = ps.segs;
  segs.resize(seqs.size());
  int64_t S = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const BatchSeq& q = seqs[i];
    if (q.ids.empty()) return absl::InvalidArgumentError(absl::StrCat("Forward: no tokens", where(i)));
    if (!q.cache) return absl::InvalidArgumentError(absl::StrCat("Forward: no cache", where(i)));
    if (q.cache->num_layers() != c.num_hidden_layers) {
      return absl::InvalidArgumentError(absl::StrCat("Forward: cache was made for a different model", where(i)));
    }
    for (size_t j = 0; j < i; ++j) {
      if (seqs[j].cache == q.cache) {
        return absl::InvalidArgumentError(
            absl::StrCat("Forward: batch sequences ", j, " and ", i, " share one KV cache"));
      }
    }
    const int64_t n = static_cast<int64_t>(q.ids.size());
    for (int64_t s = 0; s < n; ++s) {
      if (q.ids[s] < 0 || q.ids[s] >= V) {
        return absl::InvalidArgumentError(absl::StrCat("token id ", q.ids[s], " at input position ", s,
                                                       " is outside the vocabulary [0, ", V, ")", where(i)));
      }
    }
    const int64_t P0 = q.cache->length();
    if (P0 + n > c.max_position_embeddings) {
      return absl::OutOfRangeError(absl::StrCat("sequence of ", P0 + n, " tokens exceeds the context length ",
                                                c.max_position_embeddings, " (max_position_embeddings)", where(i)));
    }
    segs[i].cache = q.cache;
    segs[i].row0 = S;
    segs[i].S = n;
    segs[i].prefill = q.prefill;
    S += n;
  }
  ps.S = S;
  ps.num_layers = c.num_hidden_layers;
  ps.seqs.assign(seqs.begin(), seqs.end());
  ps.ids.resize(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    ps.ids[i].assign(seqs[i].ids.begin(), seqs[i].ids.end());
    ps.seqs[i].ids = ps.ids[i];
  }
  Timed whole(*this, &StepProfile::total);
  if (profile_) {
    ++profile_->forwards;
    profile_->rows += S;
  }
  ps.h.resize(S * H);
  {
    Timed t(*this, &StepProfile::embed);
    for (const Seg& sg : segs) {
      const BatchSeq& q = ps.seqs[&sg - segs.data()];
      for (int64_t s = 0; s < sg.S; ++s) DequantRow(weights_->embed.m, q.ids[s], ps.h.data() + (sg.row0 + s) * H);
    }
  }
  Trace("embed", ps.h.data(), S * H);
  return pass;
}

absl::Status Model::AdvancePass(ForwardPass& pass, int layers) const {
  ForwardPass::State& ps = *pass.s_;
  if (ps.failed) return absl::FailedPreconditionError("forward pass: an earlier step failed");
  if (layers < 1) return absl::InvalidArgumentError("forward pass: advance by >= 1 layer");
  Timed whole(*this, &StepProfile::total);
  const int end = std::min(config_.num_hidden_layers, ps.next_layer + layers);
  for (; ps.next_layer < end; ++ps.next_layer) {
    const int l = ps.next_layer;
    if (absl::Status st = DecoderLayer(weights_->layers[l], l, ps.h.data(), ps.S, std::span<Seg>(ps.segs), l);
        !st.ok()) {
      ps.failed = true;
      return st;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ForwardResult>> Model::FinishPass(ForwardPass& pass) const {
  ForwardPass::State& ps = *pass.s_;
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size, V = c.vocab_size;
  if (ps.failed) return absl::FailedPreconditionError("forward pass: an earlier step failed");
  if (ps.next_layer < c.num_hidden_layers) {
    return absl::FailedPreconditionError(
        absl::StrCat("forward pass: ", ps.next_layer, " of ", c.num_hidden_layers, " layers run"));
  }
  ps.failed = true;  // finished: one FinishPass per pass
  Timed whole(*this, &StepProfile::total);
  std::span<const BatchSeq> seqs = ps.seqs;
  std::vector<Seg>& segs = ps.segs;
  const std::vector<float>& h = ps.h;
  for (const BatchSeq& q : seqs) {
    for (int32_t id : q.ids) q.cache->tokens().push_back(id);
  }
  // Final norm once over the rows that want a hidden state or logits, the LM
  // head once over those that want logits.
  std::vector<int64_t> rows;   // batch rows that get the final norm
  std::vector<int64_t> lrows;  // indices into `rows` that get logits
  std::vector<ForwardResult> out(seqs.size());
  std::vector<int64_t> hid_rows(seqs.size(), 0);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int64_t lfirst = seqs[i].all_rows ? 0 : segs[i].S - 1;
    if (seqs[i].logits) out[i].rows = segs[i].S - lfirst;
    const int64_t hfirst = seqs[i].all_hidden ? 0 : seqs[i].logits ? lfirst : segs[i].S;
    hid_rows[i] = segs[i].S - hfirst;
    for (int64_t s = hfirst; s < segs[i].S; ++s) {
      if (seqs[i].logits && s >= lfirst) lrows.push_back(static_cast<int64_t>(rows.size()));
      rows.push_back(segs[i].row0 + s);
    }
  }
  const int64_t R = static_cast<int64_t>(rows.size()), L = static_cast<int64_t>(lrows.size());
  if (R == 0) return out;
  std::vector<float> x(R * H), hid(R * H), lg(L * V);
  {
    Timed t(*this, &StepProfile::lm_head);
    for (int64_t r = 0; r < R; ++r) std::memcpy(x.data() + r * H, h.data() + rows[r] * H, H * sizeof(float));
    RmsNorm(x.data(), R, H, weights_->final_norm, c.rms_norm_eps, hid.data());
    if (L == R) {
      LinearR(weights_->lm_head, hid.data(), R, lg.data());
    } else if (L > 0) {
      std::vector<float> xl(L * H);
      for (int64_t r = 0; r < L; ++r) std::memcpy(xl.data() + r * H, hid.data() + lrows[r] * H, H * sizeof(float));
      LinearR(weights_->lm_head, xl.data(), L, lg.data());
    }
  }
  if (L == R) {
    Trace("final_norm", hid.data(), R * H);
    Trace("logits", lg.data(), L * V);
  }
  int64_t h0 = 0, l0 = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    ForwardResult& fr = out[i];
    fr.hidden.assign(hid.begin() + h0 * H, hid.begin() + (h0 + hid_rows[i]) * H);
    fr.logits.assign(lg.begin() + l0 * V, lg.begin() + (l0 + fr.rows) * V);
    h0 += hid_rows[i];
    l0 += fr.rows;
  }
  return out;
}

}  // namespace moe
