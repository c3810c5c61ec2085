#include "common/model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "common/base/log.h"
#include "common/base/status.h"
#include "common/model/bf16.h"
#include "common/model/linear.h"

namespace moe {

// Per-query selected key sets of the nearest preceding full indexer layer
// (empty `valid` = no indexer yet / dense causal attention).
struct Model::TopK {
  bool valid = false;
  std::vector<std::vector<int32_t>> keys;  // per row: sorted ascending key positions
};

struct Model::Seg {
  KvCache* cache = nullptr;
  int64_t row0 = 0;  // first row in the batch
  int64_t S = 0;     // rows
  TopK topk;
};

namespace {

inline float Silu(float x) { return x / (1.0f + std::exp(-x)); }

// Indices of the k largest values (ties: lower index first), in that order.
std::vector<int> TopKIdx(const float* v, int n, int k) {
  std::vector<int> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) {
    if (v[a] != v[b]) return v[a] > v[b];
    return a < b;
  });
  idx.resize(k);
  return idx;
}

}  // namespace

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
  Linear(w, x, S, y);
}

float Model::R(float v) const { return opt_.numerics == Numerics::kHfBf16 ? RoundBF16(v) : v; }

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

void Model::Indexer(const LayerWeights& lw, const float* a, const float* cq, int64_t S, std::span<Seg> segs,
                    std::span<const int64_t> P0s, int cache_layer) const {
  const ModelConfig& c = config_;
  const int64_t ih = c.index_n_heads, id = c.index_head_dim;
  std::vector<float> q(S * ih * id), k(S * id), w(S * ih);
  LinearR(lw.idx_wq_b, cq, S, q.data());
  LinearR(lw.idx_wk, a, S, k.data());
  for (size_t g = 0; g < segs.size(); ++g) {
    const Seg& sg = segs[g];
    for (int64_t s = sg.row0; s < sg.row0 + sg.S; ++s) {
      const int64_t pos = P0s[g] + (s - sg.row0);
      // LayerNorm(eps 1e-6) in f32, one rounding at the end (HF CPU kernel).
      float* ks = k.data() + s * id;
      float mean = 0;
      for (int64_t i = 0; i < id; ++i) mean += ks[i];
      mean /= static_cast<float>(id);
      float var = 0;
      for (int64_t i = 0; i < id; ++i) var += (ks[i] - mean) * (ks[i] - mean);
      var /= static_cast<float>(id);
      const float rstd = 1.0f / std::sqrt(var + 1e-6f);
      for (int64_t i = 0; i < id; ++i) ks[i] = R((ks[i] - mean) * rstd * lw.idx_k_norm_w[i] + lw.idx_k_norm_b[i]);
      Rope(ks, pos, c.indexer_rope_interleave);
      for (int64_t j = 0; j < ih; ++j) Rope(q.data() + (s * ih + j) * id, pos, c.indexer_rope_interleave);
      sg.cache->Append(cache_layer, KvCache::kIndexKey, ks);
    }
  }
  // HF loaded in bf16 keeps weights_proj in bf16 (_keep_in_fp32_modules
  // applies to fp16 loads only): a bf16 linear, widened to fp32, then scaled.
  Mm(lw.idx_wp.m, a, S, w.data());
  const float wscale = static_cast<float>(std::pow(static_cast<double>(ih), -0.5));
  for (float& v : w) v = R(v) * wscale;
  const float sscale = static_cast<float>(std::pow(static_cast<double>(id), -0.5));
  for (size_t g = 0; g < segs.size(); ++g) {
    Seg& sg = segs[g];
    const int64_t P0 = P0s[g], T = P0 + sg.S;
    std::vector<float> keys(T * id);
    sg.cache->Read(cache_layer, KvCache::kIndexKey, 0, T, keys.data());
    TopK& topk = sg.topk;
    topk.valid = true;
    topk.keys.assign(sg.S, {});
    std::vector<float> score(T);
    for (int64_t s = 0; s < sg.S; ++s) {
      const int64_t r = sg.row0 + s;  // batch row
      const int64_t n_causal = P0 + s + 1;
      auto& sel = topk.keys[s];
      if (n_causal <= c.index_topk) {
        sel.resize(n_causal);
        std::iota(sel.begin(), sel.end(), 0);
        continue;
      }
      // Keys in parallel, the row's heads against each key at once
      // (DotF32Many: the same bits as one DotF32 per head).
#pragma omp parallel if (n_causal * ih * id > (1 << 18))
      {
        std::vector<float> dots(ih);
#pragma omp for schedule(static)
        for (int64_t t = 0; t < n_causal; ++t) {
          DotF32Many(q.data() + r * ih * id, id, ih, keys.data() + t * id, id, dots.data());
          float acc = 0;
          for (int64_t j = 0; j < ih; ++j) {
            const float d = dots[j] * sscale;
            acc += w[r * ih + j] * std::max(d, 0.0f);
          }
          score[t] = acc;
        }
      }
      auto idx = TopKIdx(score.data(), static_cast<int>(n_causal), static_cast<int>(c.index_topk));
      sel.assign(idx.begin(), idx.end());
      std::sort(sel.begin(), sel.end());
    }
  }
}

void Model::Attention(const LayerWeights& lw, const float* a, int64_t S, std::span<Seg> segs, int cache_layer,
                      float* out) const {
  const ModelConfig& c = config_;
  const int64_t nh = c.num_attention_heads, dn = c.qk_nope_head_dim, dr = c.qk_rope_head_dim, dv = c.v_head_dim;
  const int64_t dq = dn + dr, rq = c.q_lora_rank, rkv = c.kv_lora_rank;
  // Projections over every row of the batch at once.
  std::vector<float> qa(S * rq), cq(S * rq), q(S * nh * dq), kva(S * (rkv + dr)), lat(rkv);
  LinearR(lw.q_a, a, S, qa.data());
  RmsNorm(qa.data(), S, rq, lw.q_a_norm, 1e-6, cq.data());
  LinearR(lw.q_b, cq.data(), S, q.data());
  LinearR(lw.kv_a, a, S, kva.data());
  const std::string tp = absl::StrCat("layers.", lw.index, ".attn.");
  Trace(tp + "q_resid", cq.data(), S * rq);
  Trace(tp + "q", q.data(), S * nh * dq);
  Trace(tp + "kv_a", kva.data(), S * (rkv + dr));
  // Each sequence's rows go to its own cache at its own positions.
  std::vector<int64_t> P0s(segs.size());
  for (size_t g = 0; g < segs.size(); ++g) {
    KvCache& cache = *segs[g].cache;
    const int64_t P0 = P0s[g] = cache.length(cache_layer);
    for (int64_t i = 0; i < segs[g].S; ++i) {
      const int64_t s = segs[g].row0 + i;
      float* row = kva.data() + s * (rkv + dr);
      RmsNorm(row, 1, rkv, lw.kv_a_norm, 1e-6, lat.data());
      Rope(row + rkv, P0 + i, c.rope_interleave);
      cache.Append(cache_layer, KvCache::kLatent, lat.data());
      cache.Append(cache_layer, KvCache::kRope, row + rkv);
      for (int64_t h = 0; h < nh; ++h) Rope(q.data() + (s * nh + h) * dq + dn, P0 + i, c.rope_interleave);
    }
  }
  if (c.has_indexer && lw.has_indexer) Indexer(lw, a, cq.data(), S, segs, P0s, cache_layer);
  std::vector<float> attn(S * nh * dv);
  for (size_t g = 0; g < segs.size(); ++g) {
    AttendSeg(lw, q.data() + segs[g].row0 * nh * dq, segs[g], P0s[g], cache_layer, segs.size() == 1,
              attn.data() + segs[g].row0 * nh * dv);
  }
  LinearR(lw.o, attn.data(), S, out);
  Trace(tp + "out", out, S * c.hidden_size);
}

void Model::AttendSeg(const LayerWeights& lw, const float* q, const Seg& seg, int64_t P0, int cache_layer,
                      bool trace, float* attn) const {
  const ModelConfig& c = config_;
  const int64_t nh = c.num_attention_heads, dn = c.qk_nope_head_dim, dr = c.qk_rope_head_dim, dv = c.v_head_dim;
  const int64_t dq = dn + dr, rkv = c.kv_lora_rank;
  const int64_t S = seg.S, T = P0 + S;
  const KvCache& cache = *seg.cache;
  const TopK& topk = seg.topk;
  const std::string tp = absl::StrCat("layers.", lw.index, ".attn.");
  const float scale = static_cast<float>(c.softmax_scale);

  auto keys_of = [&](int64_t s) {
    std::vector<int32_t> keys;
    if (topk.valid) {
      for (int32_t t : topk.keys[s]) {
        if (t <= P0 + s) keys.push_back(t);
      }
    } else {
      keys.resize(P0 + s + 1);
      std::iota(keys.begin(), keys.end(), 0);
    }
    return keys;
  };

  // Only the cached positions some row attends to are read: with DSA top-k
  // that is index_topk of a long context (GLM-5: 2,048 of up to 200K), not
  // all of it. slot[t] = row of position t in lats / kpe.
  std::vector<int64_t> slot(T, -1);
  std::vector<int32_t> used_pos;
  if (topk.valid) {
    for (int64_t s = 0; s < S; ++s)
      for (int32_t t : keys_of(s)) slot[t] = -2;  // attended
    for (int64_t t = 0; t < T; ++t) {
      if (slot[t] != -2) continue;
      slot[t] = static_cast<int64_t>(used_pos.size());
      used_pos.push_back(static_cast<int32_t>(t));
    }
  } else {
    std::iota(slot.begin(), slot.end(), 0);
  }
  const int64_t used = topk.valid ? static_cast<int64_t>(used_pos.size()) : T;
  std::vector<float> lats(used * rkv), kpe(used * dr);
  if (topk.valid) {
    cache.ReadRows(cache_layer, KvCache::kLatent, used_pos, lats.data());
    cache.ReadRows(cache_layer, KvCache::kRope, used_pos, kpe.data());
  } else {
    cache.Read(cache_layer, KvCache::kLatent, 0, T, lats.data());
    cache.Read(cache_layer, KvCache::kRope, 0, T, kpe.data());
  }
  if (trace) {
    std::vector<float> fresh(S * rkv);
    cache.Read(cache_layer, KvCache::kLatent, P0, S, fresh.data());
    Trace(tp + "kv_latent", fresh.data(), S * rkv);
  }

  if (opt_.attention == AttentionPath::kExplicit) {
    // HF form: expand the cached latents with kv_b (bf16 like HF's cache) -
    // only those some row attends to (rows expand independently, so the
    // values are the same bits as expanding everything).
    const int64_t kvw = nh * (dn + dv);
    std::vector<float> kv(used * kvw);
    LinearR(lw.kv_b, lats.data(), used, kv.data());
#pragma omp parallel for collapse(2) schedule(static) if (S * nh * T * (dq + dv) > (1 << 18))
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t h = 0; h < nh; ++h) {
        const auto keys = keys_of(s);
        const float* qh = q + (s * nh + h) * dq;
        std::vector<float> kh(dq), sc(keys.size());
        float mx = -INFINITY;
        for (size_t i = 0; i < keys.size(); ++i) {
          const int64_t t = keys[i];
          std::memcpy(kh.data(), kv.data() + slot[t] * kvw + h * (dn + dv), dn * sizeof(float));
          std::memcpy(kh.data() + dn, kpe.data() + slot[t] * dr, dr * sizeof(float));
          sc[i] = R(R(DotF32(qh, kh.data(), dq)) * scale);
          mx = std::max(mx, sc[i]);
        }
        float sum = 0;
        for (float& v : sc) {
          v = std::exp(v - mx);
          sum += v;
        }
        for (float& v : sc) v = R(v / sum);
        float* o = attn + (s * nh + h) * dv;
        for (int64_t d = 0; d < dv; ++d) {
          float acc = 0;
          for (size_t i = 0; i < keys.size(); ++i) acc += sc[i] * kv[slot[keys[i]] * kvw + h * (dn + dv) + dn + d];
          o[d] = R(acc);
        }
      }
    }
  } else {
    // Absorbed form: q_lat = q_nope . W_UK (rkv), score = q_lat . c + q_pe . k_pe,
    // ctx = sum p c, o = W_UV . ctx. All f32.
    // Loop order, for memory traffic (GLM-5: 64 heads, rkv 512, up to 2,048
    // keys = 4 MB of latents): a thread takes a block of heads and walks each
    // row's keys once for the whole block (scores, then ctx), so the latents
    // are streamed once per block instead of twice per head; kv_b is
    // dequantized one head at a time (W_UK rows for q_lat, W_UV rows for o:
    // each read once per step, never expanded whole). Every (row, head) does
    // the same arithmetic in the same order as one head alone would.
    constexpr int64_t kHeadBlock = 16, kRowChunk = 32;
    const int64_t nblocks = (nh + kHeadBlock - 1) / kHeadBlock, nchunks = (S + kRowChunk - 1) / kRowChunk;
#pragma omp parallel if (S * nh * T * (dq + dv) > (1 << 18))
    {
      std::vector<float> w(std::max(dn, dv) * rkv), ql(kRowChunk * kHeadBlock * rkv), ctx(ql.size()), sc;
      std::vector<float> mx(kHeadBlock), sum(kHeadBlock), dl(kHeadBlock), dp(kHeadBlock);  // per head of a row
#pragma omp for schedule(static) collapse(2)
      for (int64_t blk = 0; blk < nblocks; ++blk) {
        for (int64_t ch = 0; ch < nchunks; ++ch) {
          const int64_t h0 = blk * kHeadBlock, hn = std::min(kHeadBlock, nh - h0);
          const int64_t s0 = ch * kRowChunk, sn = std::min(kRowChunk, S - s0);
          auto qrow = [&](int64_t s, int64_t hl) { return q + ((s0 + s) * nh + h0 + hl) * dq; };
          for (int64_t hl = 0; hl < hn; ++hl) {  // q_lat of the block's heads
            for (int64_t d = 0; d < dn; ++d) DequantRow(lw.kv_b.m, (h0 + hl) * (dn + dv) + d, w.data() + d * rkv);
            for (int64_t s = 0; s < sn; ++s) {
              float* qlat = ql.data() + (s * kHeadBlock + hl) * rkv;
              std::fill(qlat, qlat + rkv, 0.0f);
              const float* qh = qrow(s, hl);
              for (int64_t d = 0; d < dn; ++d) AxpyF32(qh[d], w.data() + d * rkv, rkv, qlat);
            }
          }
          for (int64_t s = 0; s < sn; ++s) {
            const auto ks = keys_of(s0 + s);  // per row, not all S at once: S x T ints for a long prefill
            const size_t nk = ks.size();
            sc.assign(hn * nk, 0.0f);
            std::fill(mx.begin(), mx.end(), -INFINITY);
            std::fill(sum.begin(), sum.end(), 0.0f);
            for (size_t i = 0; i < nk; ++i) {
              const int64_t t = ks[i];
              DotF32Many(ql.data() + s * kHeadBlock * rkv, rkv, hn, lats.data() + slot[t] * rkv, rkv, dl.data());
              DotF32Many(qrow(s, 0) + dn, dq, hn, kpe.data() + slot[t] * dr, dr, dp.data());
              for (int64_t hl = 0; hl < hn; ++hl) {
                // Same rounding points as HF on the scores (bf16 matmul output, bf16 scale).
                const float v = R(R(dl[hl] + dp[hl]) * scale);
                sc[hl * nk + i] = v;
                mx[hl] = std::max(mx[hl], v);
              }
            }
            for (int64_t hl = 0; hl < hn; ++hl) {
              for (size_t i = 0; i < nk; ++i) {
                float& v = sc[hl * nk + i];
                v = std::exp(v - mx[hl]);
                sum[hl] += v;
              }
            }
            float* cx = ctx.data() + s * kHeadBlock * rkv;
            std::fill(cx, cx + hn * rkv, 0.0f);
            for (size_t i = 0; i < nk; ++i) {
              const float* cl = lats.data() + slot[ks[i]] * rkv;
              for (int64_t hl = 0; hl < hn; ++hl) AxpyF32(R(sc[hl * nk + i] / sum[hl]), cl, rkv, cx + hl * rkv);
            }
          }
          for (int64_t hl = 0; hl < hn; ++hl) {  // o = W_UV . ctx
            for (int64_t d = 0; d < dv; ++d) DequantRow(lw.kv_b.m, (h0 + hl) * (dn + dv) + dn + d, w.data() + d * rkv);
            for (int64_t s = 0; s < sn; ++s) {
              const float* c = ctx.data() + (s * kHeadBlock + hl) * rkv;
              float* o = attn + ((s0 + s) * nh + h0 + hl) * dv;
              DotF32Many(w.data(), rkv, dv, c, rkv, o);
              for (int64_t d = 0; d < dv; ++d) o[d] = R(o[d]);
            }
          }
        }
      }
    }
  }
}

std::vector<int> Model::Route(const LayerWeights& lw, const float* logits, float* sc) const {
  const ModelConfig& c = config_;
  const int E = c.n_routed_experts, K = c.num_experts_per_tok, G = c.n_group, per = E / G;
  std::vector<float> choice(E);
  for (int e = 0; e < E; ++e) {
    sc[e] = 1.0f / (1.0f + std::exp(-logits[e]));
    choice[e] = sc[e] + lw.router_bias[e];
  }
  if (G > 1) {
    std::vector<float> gs(G);
    for (int g = 0; g < G; ++g) {
      auto t2 = TopKIdx(choice.data() + g * per, per, 2);
      gs[g] = choice[g * per + t2[0]] + choice[g * per + t2[1]];
    }
    auto keep = TopKIdx(gs.data(), G, c.topk_group);
    std::vector<bool> kept(G, false);
    for (int g : keep) kept[g] = true;
    for (int e = 0; e < E; ++e) {
      if (!kept[e / per]) choice[e] = -INFINITY;
    }
  }
  return TopKIdx(choice.data(), E, K);
}

void Model::LookAhead(int layer_id, const float* a, int64_t S, const int64_t* pos) const {
  // Router look-ahead: the next MoE layer's router on this layer's MLP input.
  const int next = layer_id + 1;
  const bool tap = lookahead_tap_ && pos != nullptr;
  if ((S > kLookAheadMaxRows && !tap) || next >= config_.num_hidden_layers || !weights_->layers[next].moe) return;
  const LayerWeights& nw = weights_->layers[next];
  const int E = config_.n_routed_experts;
  std::vector<float> logits(S * E), sc(E);
  Mm(nw.router.m, a, S, logits.data());
  std::vector<std::vector<int>> rows(S);
  for (int64_t s = 0; s < S; ++s) rows[s] = Route(nw, logits.data() + s * E, sc.data());
  if (tap)
    for (int64_t s = 0; s < S; ++s) lookahead_tap_(next, pos[s], std::span<const int>(rows[s].data(), rows[s].size()));
  if (S > kLookAheadMaxRows) return;
  std::vector<ExpertKey> keys = LookAheadKeys(next, rows, E);
  if (!keys.empty()) experts_->HintAhead(keys);
}

std::vector<ExpertKey> Model::LookAheadKeys(int next, const std::vector<std::vector<int>>& rows, int num_experts) {
  std::vector<uint8_t> want(num_experts, 0);
  int n = 0;
  for (const auto& r : rows)
    for (int e : r)
      if (e >= 0 && e < num_experts && !want[e]) want[e] = 1, ++n;
  std::vector<ExpertKey> keys;
  if (2 * n > num_experts) return keys;
  for (int e = 0; e < num_experts; ++e)
    if (want[e]) keys.push_back({next, e});
  return keys;
}

absl::Status Model::Moe(const LayerWeights& lw, int layer_id, const float* x, int64_t S,
                        std::span<const int64_t> pos, float* out) const {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size;
  const int E = c.n_routed_experts, K = c.num_experts_per_tok;
  std::vector<float> logits(S * E);
  Mm(lw.router.m, x, S, logits.data());
  Trace(absl::StrCat("layers.", lw.index, ".router.logits"), logits.data(), S * E);
  std::vector<std::vector<std::pair<int, float>>> routes(S);  // (expert, weight)
  std::vector<int> users(E, 0);
  for (int64_t s = 0; s < S; ++s) {
    std::vector<float> sc(E);
    auto idx = Route(lw, logits.data() + s * E, sc.data());
    std::vector<float> w(K);
    float sum = 0;
    for (int k = 0; k < K; ++k) {
      w[k] = sc[idx[k]];
      sum += w[k];
    }
    for (int k = 0; k < K; ++k) {
      if (c.norm_topk_prob) w[k] /= (sum + 1e-20f);
      w[k] *= static_cast<float>(c.routed_scaling_factor);
      routes[s].push_back({idx[k], w[k]});
      ++users[idx[k]];
    }
    if (route_tap_) route_tap_(layer_id, pos[s], std::span<const int>(idx.data(), idx.size()));
  }
  // Distinct experts of the batch, ascending id (HF's accumulation order).
  std::vector<ExpertKey> wanted;
  for (int e = 0; e < E; ++e) {
    if (users[e]) wanted.push_back({layer_id, e});
  }
  // The look-ahead goes first: expertd keeps the predicted experts of the
  // next layer that are resident from being evicted by this layer's fills
  // (its speculative reads queue behind demand reads either way).
  LookAhead(layer_id, x, S, pos.data());
  experts_->Hint(wanted);
  // HF's default experts path (grouped_mm): each (row, slot) output is
  // R(down) * weight in f32; a row sums its K slots in f32 (slot order =
  // descending selection score), rounds once, then adds the shared expert.
  std::vector<float> slot(S * K * H, 0.0f);
  const int64_t Im = c.moe_intermediate_size;
  for (const ExpertKey& key : wanted) {
    MOE_ASSIGN_OR_RETURN(ExpertLease lease, experts_->Get(key.layer, key.expert));
    const ExpertWeights& ew = lease.weights();
    if (ew.gate.rows != Im || ew.gate.cols != H || ew.up.rows != Im || ew.up.cols != H || ew.down.rows != H ||
        ew.down.cols != Im) {
      return absl::InvalidArgumentError(absl::StrCat("expert (layer ", key.layer, ", id ", key.expert,
                                                     ") has wrong shapes"));
    }
    std::vector<int64_t> rows, slots;
    std::vector<float> rw;
    for (int64_t s = 0; s < S; ++s) {
      for (int k = 0; k < K; ++k) {
        if (routes[s][k].first == key.expert) {
          rows.push_back(s);
          slots.push_back(s * K + k);
          rw.push_back(routes[s][k].second);
        }
      }
    }
    const int64_t n = static_cast<int64_t>(rows.size());
    std::vector<float> xin(n * H), g(n * Im), u(n * Im), y(n * H);
    for (int64_t i = 0; i < n; ++i) std::memcpy(xin.data() + i * H, x + rows[i] * H, H * sizeof(float));
    Mm(ew.gate, xin.data(), n, g.data());
    Mm(ew.up, xin.data(), n, u.data());
    for (int64_t i = 0; i < n * Im; ++i) g[i] = R(R(Silu(R(g[i]))) * R(u[i]));
    Mm(ew.down, g.data(), n, y.data());
    for (int64_t i = 0; i < n; ++i) {
      float* dst = slot.data() + slots[i] * H;
      for (int64_t d = 0; d < H; ++d) dst[d] = R(y[i * H + d]) * rw[i];
    }
  }
  std::vector<float> acc(S * H, 0.0f);
  for (int64_t s = 0; s < S; ++s) {
    for (int64_t d = 0; d < H; ++d) {
      float a = 0;
      for (int k = 0; k < K; ++k) a += slot[(s * K + k) * H + d];
      acc[s * H + d] = R(a);
    }
  }
  if (lw.has_shared) {
    std::vector<float> sh(S * H);
    Mlp(lw.sh_gate, lw.sh_up, lw.sh_down, x, S, sh.data());
    for (int64_t i = 0; i < S * H; ++i) out[i] = R(acc[i] + sh[i]);
  } else {
    std::memcpy(out, acc.data(), S * H * sizeof(float));
  }
  return absl::OkStatus();
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
    for (const Seg& sg : segs) {
      const int64_t p0 = sg.cache->length(cache_layer) - sg.S;
      for (int64_t i = 0; i < sg.S; ++i) pos[sg.row0 + i] = p0 + i;
    }
    MOE_RETURN_IF_ERROR(Moe(lw, layer_id, a.data(), S, pos, o.data()));
  } else {
    LookAhead(layer_id, a.data(), S);
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

absl::StatusOr<std::vector<ForwardResult>> Model::ForwardBatch(std::span<const BatchSeq> seqs) const {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size, V = c.vocab_size;
  if (seqs.empty()) return absl::InvalidArgumentError("Forward: no sequences");
  const bool many = seqs.size() > 1;
  auto where = [&](size_t i) { return many ? absl::StrCat(" (batch sequence ", i, ")") : std::string(); };
  // Validate every sequence before touching any cache.
  std::vector<Seg> segs(seqs.size());
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
    S += n;
  }
  std::vector<float> h(S * H);
  for (const Seg& sg : segs) {
    const BatchSeq& q = seqs[&sg - segs.data()];
    for (int64_t s = 0; s < sg.S; ++s) DequantRow(weights_->embed.m, q.ids[s], h.data() + (sg.row0 + s) * H);
  }
  Trace("embed", h.data(), S * H);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    MOE_RETURN_IF_ERROR(DecoderLayer(weights_->layers[l], l, h.data(), S, std::span<Seg>(segs), l));
  }
  for (const BatchSeq& q : seqs) {
    for (int32_t id : q.ids) q.cache->tokens().push_back(id);
  }
  // Final norm + LM head once over the rows that want logits.
  std::vector<int64_t> rows;
  std::vector<ForwardResult> out(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (!seqs[i].logits) continue;
    const int64_t first = seqs[i].all_rows ? 0 : segs[i].S - 1;
    out[i].rows = segs[i].S - first;
    for (int64_t s = first; s < segs[i].S; ++s) rows.push_back(segs[i].row0 + s);
  }
  const int64_t R = static_cast<int64_t>(rows.size());
  if (R == 0) return out;
  std::vector<float> x(R * H), hid(R * H), lg(R * V);
  for (int64_t r = 0; r < R; ++r) std::memcpy(x.data() + r * H, h.data() + rows[r] * H, H * sizeof(float));
  RmsNorm(x.data(), R, H, weights_->final_norm, c.rms_norm_eps, hid.data());
  LinearR(weights_->lm_head, hid.data(), R, lg.data());
  Trace("final_norm", hid.data(), R * H);
  Trace("logits", lg.data(), R * V);
  int64_t r0 = 0;
  for (ForwardResult& fr : out) {
    fr.hidden.assign(hid.begin() + r0 * H, hid.begin() + (r0 + fr.rows) * H);
    fr.logits.assign(lg.begin() + r0 * V, lg.begin() + (r0 + fr.rows) * V);
    r0 += fr.rows;
  }
  return out;
}

absl::StatusOr<MtpResult> Model::MtpForward(std::span<const float> hidden, std::span<const int32_t> next_ids,
                                            KvCache& mtp_cache) const {
  const ModelConfig& c = config_;
  if (!weights_->mtp) return absl::FailedPreconditionError("the checkpoint has no MTP layer");
  const int64_t S = static_cast<int64_t>(next_ids.size()), H = c.hidden_size, V = c.vocab_size;
  if (S == 0 || static_cast<int64_t>(hidden.size()) != S * H) {
    return absl::InvalidArgumentError("MtpForward: hidden must hold one row per next id");
  }
  for (int32_t id : next_ids) {
    if (id < 0 || id >= V) return absl::InvalidArgumentError(absl::StrCat("token id ", id, " outside the vocabulary"));
  }
  if (mtp_cache.length() + S > c.max_position_embeddings) {
    return absl::OutOfRangeError("MTP sequence exceeds the context length (max_position_embeddings)");
  }
  const MtpWeights& m = *weights_->mtp;
  std::vector<float> e(S * H), cat(S * 2 * H), z(S * H), hn(S * H), en(S * H);
  for (int64_t s = 0; s < S; ++s) DequantRow(weights_->embed.m, next_ids[s], e.data() + s * H);
  RmsNorm(e.data(), S, H, m.enorm, c.rms_norm_eps, en.data());
  RmsNorm(hidden.data(), S, H, m.hnorm, c.rms_norm_eps, hn.data());
  for (int64_t s = 0; s < S; ++s) {
    std::memcpy(cat.data() + s * 2 * H, en.data() + s * H, H * sizeof(float));
    std::memcpy(cat.data() + s * 2 * H + H, hn.data() + s * H, H * sizeof(float));
  }
  LinearR(m.eh_proj, cat.data(), S, z.data());
  Seg seg;
  seg.cache = &mtp_cache;
  seg.S = S;
  MOE_RETURN_IF_ERROR(DecoderLayer(m.layer, c.num_hidden_layers, z.data(), S, std::span<Seg>(&seg, 1), 0));
  MtpResult r;
  r.rows = S;
  r.out = z;
  std::vector<float> y(S * H);
  RmsNorm(z.data(), S, H, m.shared_head_norm, c.rms_norm_eps, y.data());
  r.logits.resize(S * V);
  LinearR(weights_->lm_head, y.data(), S, r.logits.data());
  return r;
}

}  // namespace moe
