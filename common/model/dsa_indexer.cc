// DSA lightning indexer (GLM-5 glm_moe_dsa): per query row, the index_topk
// cached key positions its attention reads (docs/MODEL.md, "DSA indexer").
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

using model_detail::TopKSetAscending;

void Model::Indexer(const LayerWeights& lw, const float* a, const float* cq, int64_t S, std::span<Seg> segs,
                    std::span<const int64_t> P0s, int cache_layer) const {
  const ModelConfig& c = config_;
  Timed timed(*this, &StepProfile::indexer);
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
    if (sg.share) {
      // A later MTP draft step: the round's step-0 selection plus what came after it.
      sg.topk.valid = true;
      sg.topk.keys.assign(sg.S, {});
      for (int64_t s = 0; s < sg.S; ++s) {
        auto& sel = sg.topk.keys[s];
        sel = *sg.share;
        for (int64_t t = sg.share_pos + 1; t <= P0 + s; ++t) sel.push_back(static_cast<int32_t>(t));
      }
      continue;
    }
    const bool q8 = sg.cache->index_q8() && kernels_ != nullptr;
    std::vector<float> keys;  // exact keys (the KV dtype's values)
    if (!q8) {
      keys.resize(T * id);
      sg.cache->Read(cache_layer, KvCache::kIndexKey, 0, T, keys.data());
    }
    TopK& topk = sg.topk;
    topk.valid = true;
    topk.keys.assign(sg.S, {});
    std::vector<float> score(T), dots;
    for (int64_t s = 0; s < sg.S; ++s) {
      const int64_t r = sg.row0 + s;  // batch row
      const int64_t n_causal = P0 + s + 1;
      auto& sel = topk.keys[s];
      if (n_causal <= c.index_topk) {
        sel.resize(n_causal);
        std::iota(sel.begin(), sel.end(), 0);
        continue;
      }
      if (profile_) ++profile_->indexer_scored_rows;
      if (q8) {
        ScoreQ8(q.data() + r * ih * id, w.data() + r * ih, *sg.cache, cache_layer, n_causal, dots, score.data());
      } else {
        // Blocks of keys in parallel, the row's heads against each key at
        // once (DotF32Many: the same bits as one DotF32 per head).
        constexpr int64_t kKeys = 256;
        Parallel((n_causal + kKeys - 1) / kKeys, n_causal * ih * id > (1 << 18), [&](int64_t b) {
          std::vector<float> hd(ih);
          for (int64_t t = b * kKeys, end = std::min(n_causal, t + kKeys); t < end; ++t) {
            DotF32Many(q.data() + r * ih * id, id, ih, keys.data() + t * id, id, hd.data());
            float acc = 0;
            for (int64_t j = 0; j < ih; ++j) acc += w[r * ih + j] * std::max(hd[j] * sscale, 0.0f);
            score[t] = acc;
          }
        });
      }
      sel = TopKSetAscending(score.data(), static_cast<int>(n_causal), static_cast<int>(c.index_topk));
    }
  }
}

// Int8 index keys (KvCache index_q8): a row's heads score its first
// n_causal cached keys at once on the int8 kernels (the keys are a q8_row
// matrix [n_causal, id]; IDOT quantizes each head's query to int8 with one
// scale, int32 sums: the same bits on every ISA, batch invariant), then the
// weighted ReLU sum over heads in f32, head order. 4x fewer key bytes than
// f32 and int8 multiply-adds instead of f32 ones (docs/MODEL.md §4.5).
void Model::ScoreQ8(const float* q_row, const float* w_row, const KvCache& cache, int cache_layer, int64_t n_causal,
                    std::vector<float>& dots, float* score) const {
  const ModelConfig& c = config_;
  const int64_t ih = c.index_n_heads, id = c.index_head_dim;
  const float sscale = static_cast<float>(std::pow(static_cast<double>(id), -0.5));
  const KvCache::Q8Rows keys = cache.IndexKeysQ8(cache_layer);
  const kernels::QMatrix km{QFormat::kQ8Row, n_causal, id, reinterpret_cast<const uint8_t*>(keys.data), keys.scales};
  dots.resize(static_cast<size_t>(ih * n_causal));  // dots[j * n_causal + t] = qI_j . kI(t)
  absl::Status st;
  {
    std::lock_guard<std::mutex> lock(kernels_mu_);
    st = kernels_->Matmul(km, q_row, ih, dots.data());
  }
  if (!st.ok()) {  // (only for shapes the kernels refuse) the reference matmul over the same int8 keys
    MOE_LOG(WARNING) << "indexer: int8 kernels failed (" << st.message() << "); reference matmul";
    const WeightMatrix wm{km.format, n_causal, id, km.data, km.scales};
    Linear(wm, q_row, ih, dots.data(), SerialFor);
  }
  // Heads outer, keys inner (contiguous in dots, vectorized): each key's
  // sum still adds the heads in head order, from 0.
  constexpr int64_t kKeys = 2048;
  Parallel((n_causal + kKeys - 1) / kKeys, n_causal * ih > (1 << 16), [&](int64_t b) {
    const int64_t t0 = b * kKeys, t1 = std::min(n_causal, t0 + kKeys);
    std::fill(score + t0, score + t1, 0.0f);
    for (int64_t j = 0; j < ih; ++j) {
      const float* d = dots.data() + j * n_causal;
      for (int64_t t = t0; t < t1; ++t) score[t] += w_row[j] * std::max(d[t] * sscale, 0.0f);
    }
  });
}

}  // namespace moe
