// DSA lightning indexer (GLM-5 glm_moe_dsa): per query row, the index_topk
// cached key positions its attention reads (docs/MODEL.md, "DSA indexer").
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

using model_detail::TopKIdx;

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

}  // namespace moe
