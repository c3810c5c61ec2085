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

using model_detail::UninitF32;

void Model::Attention(const LayerWeights& lw, const float* a, int64_t S, std::span<Seg> segs, int cache_layer,
                      float* out) const {
  const ModelConfig& c = config_;
  const int64_t nh = c.num_attention_heads, dn = c.qk_nope_head_dim, dr = c.qk_rope_head_dim, dv = c.v_head_dim;
  const int64_t dq = dn + dr, rq = c.q_lora_rank, rkv = c.kv_lora_rank;
  // The indexer's and the core's times are their own; attention gets the
  // rest (their Timed run inside this one, so their seconds are taken back
  // out below).
  Timed timed(*this, &StepProfile::attention);
  struct TakeBack {
    StepProfile* p;
    double indexer, core;
    ~TakeBack() {
      if (p) p->attention -= (p->indexer - indexer) + (p->attention_core - core);
    }
  } take_back{profile_, profile_ ? profile_->indexer : 0, profile_ ? profile_->attention_core : 0};
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
  if (Timed core(*this, &StepProfile::attention_core); opt_.attention == AttentionPath::kExplicit) {
    for (size_t g = 0; g < segs.size(); ++g) {
      AttendExplicit(lw, q.data() + segs[g].row0 * nh * dq, segs[g], P0s[g], cache_layer, segs.size() == 1,
                     attn.data() + segs[g].row0 * nh * dv);
    }
  } else {
    AttendAbsorbed(lw, q.data(), S, segs, P0s, cache_layer, attn.data());
  }
  LinearR(lw.o, attn.data(), S, out);
  Trace(tp + "out", out, S * c.hidden_size);
}

// Only the cached positions some row attends to are read: with DSA top-k
// that is index_topk of a long context (GLM-5: 2,048 of up to 200K), not
// all of it.
Model::Attended Model::GatherAttended(const Seg& seg, int64_t P0, int cache_layer, bool trace,
                                      const std::string& tp) const {
  const ModelConfig& c = config_;
  const int64_t dr = c.qk_rope_head_dim, rkv = c.kv_lora_rank;
  const int64_t S = seg.S, T = P0 + S;
  const KvCache& cache = *seg.cache;
  Attended at;
  at.slot.assign(T, -1);
  std::vector<int32_t> used_pos;
  if (seg.topk.valid) {
    for (int64_t s = 0; s < S; ++s)
      for (int32_t t : at.KeysOf(seg, P0, s)) at.slot[t] = -2;  // attended
    for (int64_t t = 0; t < T; ++t) {
      if (at.slot[t] != -2) continue;
      at.slot[t] = static_cast<int64_t>(used_pos.size());
      used_pos.push_back(static_cast<int32_t>(t));
    }
  } else {
    std::iota(at.slot.begin(), at.slot.end(), 0);
  }
  const int64_t used = at.used = seg.topk.valid ? static_cast<int64_t>(used_pos.size()) : T;
  at.lats = UninitF32(used * rkv);
  at.kpe = UninitF32(used * dr);
  // Blocks of rows on every thread (the bf16 -> f32 reads of 2,048 rows are
  // ~0.7 ms a layer on one).
  constexpr int64_t kBlock = 256;
  Parallel((used + kBlock - 1) / kBlock, used * (rkv + dr) > (1 << 16), [&](int64_t b) {
    const int64_t r0 = b * kBlock, n = std::min(kBlock, used - r0);
    if (seg.topk.valid) {
      const std::span<const int32_t> rows = std::span<const int32_t>(used_pos).subspan(r0, n);
      cache.ReadRows(cache_layer, KvCache::kLatent, rows, at.lats.get() + r0 * rkv);
      cache.ReadRows(cache_layer, KvCache::kRope, rows, at.kpe.get() + r0 * dr);
    } else {
      cache.Read(cache_layer, KvCache::kLatent, r0, n, at.lats.get() + r0 * rkv);
      cache.Read(cache_layer, KvCache::kRope, r0, n, at.kpe.get() + r0 * dr);
    }
  });
  if (trace) {
    std::vector<float> fresh(S * rkv);
    cache.Read(cache_layer, KvCache::kLatent, P0, S, fresh.data());
    Trace(tp + "kv_latent", fresh.data(), S * rkv);
  }
  return at;
}

void Model::AttendExplicit(const LayerWeights& lw, const float* q, const Seg& seg, int64_t P0, int cache_layer,
                           bool trace, float* attn) const {
  const ModelConfig& c = config_;
  const int64_t nh = c.num_attention_heads, dn = c.qk_nope_head_dim, dr = c.qk_rope_head_dim, dv = c.v_head_dim;
  const int64_t dq = dn + dr;
  const int64_t S = seg.S, T = P0 + S;
  const float scale = static_cast<float>(c.softmax_scale);
  const Attended at = GatherAttended(seg, P0, cache_layer, trace, absl::StrCat("layers.", lw.index, ".attn."));
  const int64_t used = at.used;
  // HF form: expand the cached latents with kv_b (bf16 like HF's cache) -
  // only those some row attends to (rows expand independently, so the
  // values are the same bits as expanding everything).
  const int64_t kvw = nh * (dn + dv);
  std::vector<float> kv(used * kvw);
  LinearR(lw.kv_b, at.lats.get(), used, kv.data());
  Parallel(S * nh, S * nh * T * (dq + dv) > (1 << 18), [&](int64_t task) {
    const int64_t s = task / nh, h = task % nh;
    const auto keys = at.KeysOf(seg, P0, s);
    const float* qh = q + (s * nh + h) * dq;
    std::vector<float> kh(dq), sc(keys.size());
    float mx = -INFINITY;
    for (size_t i = 0; i < keys.size(); ++i) {
      const int64_t t = keys[i];
      std::memcpy(kh.data(), kv.data() + at.slot[t] * kvw + h * (dn + dv), dn * sizeof(float));
      std::memcpy(kh.data() + dn, at.kpe.get() + at.slot[t] * dr, dr * sizeof(float));
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
      for (size_t i = 0; i < keys.size(); ++i) acc += sc[i] * kv[at.slot[keys[i]] * kvw + h * (dn + dv) + dn + d];
      o[d] = R(acc);
    }
  });
}

// Absorbed form: q_lat = q_nope . W_UK (rkv), score = q_lat . c + q_pe . k_pe,
// ctx = sum p c, o = W_UV . ctx. All f32.
// Work order, for memory traffic (GLM-5: 64 heads, rkv 512, up to 2,048
// keys = 4 MB of latents per sequence), over chunks of the batch's rows:
//   1. q_lat, 8 heads per task: each head's W_UK rows of kv_b dequantized
//      once for every row of the chunk, whichever sequence it belongs to (a
//      decode batch of 32 sequences dequantizes kv_b once, not 32 times);
//   2. per sequence, a block of 16 heads of one row per task walks the row's
//      keys once for the whole block, the 16 heads in the lanes of one
//      vector (DotF32Heads16 for the scores, WeightedRowsHeads16 for ctx), so
//      each latent is loaded once per block instead of once per head;
//   3. o = W_UV . ctx, 8 heads per task, their W_UV rows dequantized once.
// Every (row, head) does the same arithmetic in the same order as one head
// of one row alone would: the result never depends on the batch.
void Model::AttendAbsorbed(const LayerWeights& lw, const float* q, int64_t S, std::span<Seg> segs,
                           std::span<const int64_t> P0s, int cache_layer, float* attn) const {
  const ModelConfig& c = config_;
  const int64_t nh = c.num_attention_heads, dn = c.qk_nope_head_dim, dr = c.qk_rope_head_dim, dv = c.v_head_dim;
  const int64_t dq = dn + dr, rkv = c.kv_lora_rank;
  const float scale = static_cast<float>(c.softmax_scale);
  const std::string tp = absl::StrCat("layers.", lw.index, ".attn.");
  constexpr int64_t kHeadBlock = 16, kRows = 32;
  const int64_t nblocks = (nh + kHeadBlock - 1) / kHeadBlock;
  std::vector<int32_t> seg_of(S);
  for (size_t g = 0; g < segs.size(); ++g)
    for (int64_t i = 0; i < segs[g].S; ++i) seg_of[segs[g].row0 + i] = static_cast<int32_t>(g);
  const bool heads_worth = nh * std::max(dn, dv) * rkv > (1 << 18);
  const int64_t chunk_values = std::min(kRows, S) * nh * rkv;
  const auto ql = UninitF32(chunk_values), ctx = UninitF32(chunk_values);
  // Phases 1 and 3 in blocks of heads: one dequantized-row buffer per task.
  constexpr int64_t kHeadsPerTask = 8;
  const int64_t head_tasks = (nh + kHeadsPerTask - 1) / kHeadsPerTask;
  Attended at;
  int64_t gathered = -1;  // the segment `at` holds (a long prefill spans several chunks)
  for (int64_t r0 = 0; r0 < S; r0 += kRows) {
    const int64_t rn = std::min(kRows, S - r0);
    Parallel(head_tasks, heads_worth, [&](int64_t task) {  // 1. q_lat
      const auto w = UninitF32(dn * rkv);
      for (int64_t h = task * kHeadsPerTask; h < std::min(nh, (task + 1) * kHeadsPerTask); ++h) {
        for (int64_t d = 0; d < dn; ++d) DequantRow(lw.kv_b.m, h * (dn + dv) + d, w.get() + d * rkv);
        for (int64_t s = 0; s < rn; ++s) {
          float* qlat = ql.get() + (s * nh + h) * rkv;
          std::fill(qlat, qlat + rkv, 0.0f);
          const float* qh = q + ((r0 + s) * nh + h) * dq;
          for (int64_t d = 0; d < dn; ++d) AxpyF32(qh[d], w.get() + d * rkv, rkv, qlat);
        }
      }
    });
    for (int64_t s = 0; s < rn;) {  // 2. scores and ctx, one sequence's rows of the chunk at a time
      const int32_t g = seg_of[r0 + s];
      const Seg& seg = segs[g];
      const int64_t P0 = P0s[g], T = P0 + seg.S;
      const int64_t end = std::min(rn, seg.row0 + seg.S - r0);
      static_assert(kHeadBlock == kHeads16);
      if (gathered != g) {
        at = GatherAttended(seg, P0, cache_layer, segs.size() == 1, tp);
        gathered = g;
      }
      Parallel(nblocks * (end - s), seg.S * nh * T * (dq + dv) > (1 << 18), [&](int64_t task) {
        const int64_t row = s + task / nblocks;  // in the chunk
        const int64_t h0 = (task % nblocks) * kHeadBlock, hn = std::min(kHeadBlock, nh - h0);
        const int64_t seg_row = r0 + row - seg.row0;
        const float* qpe = q + ((r0 + row) * nh + h0) * dq + dn;
        const float* qlat = ql.get() + (row * nh + h0) * rkv;
        const auto ks = at.KeysOf(seg, P0, seg_row);
        const int64_t nk = static_cast<int64_t>(ks.size());
        constexpr int64_t H16 = kHeads16;
        // The block's queries as columns (n x 16; heads past hn stay 0).
        std::vector<float> qT(rkv * H16, 0.0f), peT(dr * H16, 0.0f);
        for (int64_t hl = 0; hl < hn; ++hl) {
          for (int64_t j = 0; j < rkv; ++j) qT[j * H16 + hl] = qlat[hl * rkv + j];
          for (int64_t j = 0; j < dr; ++j) peT[j * H16 + hl] = qpe[hl * dq + j];
        }
        std::vector<const float*> lrow(nk), prow(nk);
        for (int64_t i = 0; i < nk; ++i) {
          lrow[i] = at.lats.get() + at.slot[ks[i]] * rkv;
          prow[i] = at.kpe.get() + at.slot[ks[i]] * dr;
        }
        const auto sc = UninitF32(nk * H16), dp = UninitF32(nk * H16);  // [key][head]
        std::vector<float> mx(H16, -INFINITY), sum(H16, 0.0f);
        DotF32Heads16(qT.data(), lrow.data(), nk, rkv, sc.get());
        DotF32Heads16(peT.data(), prow.data(), nk, dr, dp.get());
        for (int64_t i = 0; i < nk; ++i) {
          for (int64_t hl = 0; hl < hn; ++hl) {
            // Same rounding points as HF on the scores (bf16 matmul output, bf16 scale).
            float& v = sc[i * H16 + hl];
            v = R(R(v + dp[i * H16 + hl]) * scale);
            mx[hl] = std::max(mx[hl], v);
          }
        }
        for (int64_t hl = 0; hl < hn; ++hl) {
          for (int64_t i = 0; i < nk; ++i) {
            float& v = sc[i * H16 + hl];
            v = std::exp(v - mx[hl]);
            sum[hl] += v;
          }
        }
        for (int64_t i = 0; i < nk; ++i) {  // the weights, in place (heads past hn: 0)
          for (int64_t hl = 0; hl < H16; ++hl) sc[i * H16 + hl] = hl < hn ? R(sc[i * H16 + hl] / sum[hl]) : 0.0f;
        }
        const auto cx = UninitF32(H16 * rkv);
        WeightedRowsHeads16(sc.get(), lrow.data(), nk, rkv, cx.get());
        std::memcpy(ctx.get() + (row * nh + h0) * rkv, cx.get(), hn * rkv * sizeof(float));
      });
      s = end;
    }
    Parallel(head_tasks, heads_worth, [&](int64_t task) {  // 3. o = W_UV . ctx
      const auto w = UninitF32(dv * rkv);
      for (int64_t h = task * kHeadsPerTask; h < std::min(nh, (task + 1) * kHeadsPerTask); ++h) {
        for (int64_t d = 0; d < dv; ++d) DequantRow(lw.kv_b.m, h * (dn + dv) + dn + d, w.get() + d * rkv);
        for (int64_t s = 0; s < rn; ++s) {
          float* o = attn + ((r0 + s) * nh + h) * dv;
          DotF32Many(w.get(), rkv, dv, ctx.get() + (s * nh + h) * rkv, rkv, o);
          for (int64_t d = 0; d < dv; ++d) o[d] = R(o[d]);
        }
      }
    });
  }
}

}  // namespace moe
