// The MoE block: sigmoid router with bias and group limit, top-k, and the
// routed experts fetched once per batch from the ExpertSource, plus the
// shared expert.
#include "common/model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>

#include "common/base/status.h"
#include "common/model/bf16.h"
#include "common/model/linear.h"
#include "common/model/model_internal.h"

namespace moe {

using model_detail::Silu;
using model_detail::TopKIdx;

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

absl::Status Model::Moe(const LayerWeights& lw, int layer_id, const float* x, int64_t S,
                        std::span<const int64_t> pos, std::span<const uint8_t> prefill, float* out) const {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size;
  const int E = c.n_routed_experts, K = c.num_experts_per_tok;
  std::optional<Timed> router_time(std::in_place, *this, &StepProfile::router);
  std::vector<float> logits(S * E);
  Mm(lw.router.m, x, S, logits.data());
  Trace(absl::StrCat("layers.", lw.index, ".router.logits"), logits.data(), S * E);
  std::vector<std::vector<std::pair<int, float>>> routes(S);  // (expert, weight)
  std::vector<int> users(E, 0);
  std::vector<uint8_t> decode_use(E, 0);  // some decode row uses it (else only prefill rows: FetchUse::kPrefill)
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
      if (prefill.empty() || !prefill[s]) decode_use[idx[k]] = 1;
    }
    if (route_tap_) route_tap_(layer_id, pos[s], std::span<const int>(idx.data(), idx.size()));
  }
  // Distinct experts of the batch, ascending id (HF's accumulation order).
  // Decode experts are fetched first (and hinted: expertd starts their reads
  // while the shared expert runs); prefill-only ones are streamed without
  // displacing the decode working set and are not hinted (a hint fills like demand).
  std::vector<ExpertKey> wanted, hinted;
  std::vector<size_t> decode_idx, prefill_idx;  // into wanted
  for (int e = 0; e < E; ++e) {
    if (!users[e]) continue;
    (decode_use[e] ? decode_idx : prefill_idx).push_back(wanted.size());
    wanted.push_back({layer_id, e});
    if (decode_use[e]) hinted.push_back({layer_id, e});
  }
  // The look-ahead goes first: expertd keeps the predicted experts of the
  // next layer that are resident from being evicted by this layer's fills
  // (its speculative reads queue behind demand reads either way).
  LookAhead(layer_id, x, S, pos.data());
  if (!hinted.empty()) experts_->Hint(hinted);
  router_time.reset();
  // The shared expert needs only x: it runs first, while the routed
  // experts' reads (started by the hint above) are in flight.
  std::vector<float> sh;
  if (lw.has_shared) {
    Timed t(*this, &StepProfile::shared_expert);
    sh.resize(S * H);
    Mlp(lw.sh_gate, lw.sh_up, lw.sh_down, x, S, sh.data());
  }
  const double fetch_before = profile_ ? profile_->expert_fetch : 0;
  std::optional<Timed> experts_time(std::in_place, *this, &StepProfile::routed_experts);
  // HF's default experts path (grouped_mm): each (row, slot) output is
  // R(down) * weight in f32; a row sums its K slots in f32 (slot order =
  // descending selection score), rounds once, then adds the shared expert.
  // Each routed expert is computed as soon as its lease arrives (GetEach:
  // hits first, misses as their reads land) and writes only its own slots,
  // so the arrival order never changes the result.
  std::vector<float> slot(S * K * H, 0.0f);
  const int64_t Im = c.moe_intermediate_size;
  // expert_fetch: the time GetEach blocked, i.e. its wall time minus the
  // expert compute done in the callback as leases arrive.
  using Clock = std::chrono::steady_clock;
  const Clock::time_point fetch_t0 = Clock::now();
  double in_ready_s = 0;
  auto compute = [&](size_t index, ExpertLease lease) -> absl::Status {
    const Clock::time_point ready_t0 = Clock::now();
    const ExpertKey key = wanted[index];
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
    in_ready_s += std::chrono::duration<double>(Clock::now() - ready_t0).count();
    return absl::OkStatus();
  };
  for (const auto& part : {std::pair{&decode_idx, FetchUse::kDecode}, std::pair{&prefill_idx, FetchUse::kPrefill}}) {
    const std::vector<size_t>& which = *part.first;
    if (which.empty()) continue;
    std::vector<int> ids;
    for (size_t i : which) ids.push_back(wanted[i].expert);
    MOE_RETURN_IF_ERROR(experts_->GetEach(
        layer_id, ids, [&](size_t j, ExpertLease lease) { return compute(which[j], std::move(lease)); },
        part.second));
  }
  if (profile_)
    profile_->expert_fetch += std::chrono::duration<double>(Clock::now() - fetch_t0).count() - in_ready_s;
  std::vector<float> acc(S * H, 0.0f);
  for (int64_t s = 0; s < S; ++s) {
    for (int64_t d = 0; d < H; ++d) {
      float a = 0;
      for (int k = 0; k < K; ++k) a += slot[(s * K + k) * H + d];
      acc[s * H + d] = R(a);
    }
  }
  experts_time.reset();
  if (profile_) profile_->routed_experts -= profile_->expert_fetch - fetch_before;  // fetch is its own
  if (lw.has_shared) {
    for (int64_t i = 0; i < S * H; ++i) out[i] = R(acc[i] + sh[i]);
  } else {
    std::memcpy(out, acc.data(), S * H * sizeof(float));
  }
  return absl::OkStatus();
}

}  // namespace moe
