// MLA attention: the query / compressed-KV projections over the batch, each
// sequence's rows appended to its own cache, and the per-sequence attention
// core in HF's explicit form or the absorbed form (AttentionPath, model.h).
#include "common/model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "common/base/status.h"
#include "common/model/bf16.h"
#include "common/model/linear.h"
#include "common/model/model_internal.h"

namespace moe {

void Model::Attention(const LayerWeights& lw, const float* a, int64_t S, std::span<Seg> segs, int cache_layer,
                      float* out) const {
  const ModelConfig& c = config_;
  const int64_t nh = c.num_attention_heads, dn = c.qk_nope_head_dim, dr = c.qk_rope_head_dim, dv = c.v_head_dim;
  const int64_t dq = dn + dr, rq = c.q_lora_rank, rkv = c.kv_lora_rank;
  // The indexer's time is its own; attention gets the rest (Indexer's Timed
  // runs inside this one, so its seconds are taken back out below).
  const double indexer_before = profile_ ? profile_->indexer : 0;
  Timed timed(*this, &StepProfile::attention);
  struct TakeBack {
    StepProfile* p;
    double before;
    ~TakeBack() {
      if (p) p->attention -= p->indexer - before;
    }
  } take_back{profile_, indexer_before};
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

}  // namespace moe
