// Router look-ahead: the next MoE layer's router applied to this layer's MLP
// input predicts its experts; sent as ExpertSource::HintAhead (and to the
// look-ahead tap) before this layer's own fetches.
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

}  // namespace moe
