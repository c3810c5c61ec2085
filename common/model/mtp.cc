// The MTP (nextn) draft layer: enorm/hnorm of the next token's embedding and
// the main model's hidden state, eh_proj, one MoE decoder layer on its own
// cache, shared_head.norm and the LM head.
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

absl::StatusOr<MtpResult> Model::MtpForward(std::span<const float> hidden, std::span<const int32_t> next_ids,
                                            KvCache& mtp_cache, const IndexShare* share,
                                            IndexShare* topk_out, bool last_logits_only) const {
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
  if (share) {
    seg.share = &share->keys;
    seg.share_pos = share->pos;
  }
  const int64_t P0 = mtp_cache.length();
  MOE_RETURN_IF_ERROR(DecoderLayer(m.layer, c.num_hidden_layers, z.data(), S, std::span<Seg>(&seg, 1), 0));
  if (topk_out) {
    topk_out->pos = P0 + S - 1;
    if (seg.topk.valid && !seg.topk.keys.empty()) {
      topk_out->keys = seg.topk.keys.back();
    } else {  // no indexer: every causal key
      topk_out->keys.resize(P0 + S);
      std::iota(topk_out->keys.begin(), topk_out->keys.end(), 0);
    }
  }
  MtpResult r;
  r.rows = S;
  r.out = z;
  const int64_t L = last_logits_only ? 1 : S;  // rows of logits, the last L
  std::vector<float> y(L * H);
  RmsNorm(z.data() + (S - L) * H, L, H, m.shared_head_norm, c.rms_norm_eps, y.data());
  r.logits.resize(L * V);
  LinearR(weights_->lm_head, y.data(), L, r.logits.data());
  return r;
}

}  // namespace moe
