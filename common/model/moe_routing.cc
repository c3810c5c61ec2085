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
  // Each expert's uses in this batch, in (row, slot) order: its rows (ascending),
  // their slot s * K + k and routing weight. Derived once; every path reads it.
  struct Uses {
    std::vector<int64_t> rows, slots;
    std::vector<float> weights;
  };
  std::vector<Uses> uses(E);
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
      Uses& u = uses[idx[k]];
      u.rows.push_back(s);
      u.slots.push_back(s * K + k);
      u.weights.push_back(w[k]);
      if (prefill.empty() || !prefill[s]) decode_use[idx[k]] = 1;
    }
    if (route_tap_) route_tap_(layer_id, pos[s], std::span<const int>(idx.data(), idx.size()));
  }
  // Distinct experts of the batch, ascending id (HF's accumulation order).
  // Decode experts are fetched first (and hinted: expertd starts their reads
  // while the shared expert runs); prefill-only ones are streamed without
  // displacing the decode working set and are not hinted (a hint fills like demand).
  std::vector<ExpertKey> wanted, hinted;
  std::vector<size_t> decode_idx, prefill_idx;  // into wanted, computed here
  // Experts another host owns (expert parallelism): their rows go there; the
  // outputs come back uncombined and are combined below in slot order.
  std::vector<RemoteExpertJob> remote_jobs;
  std::vector<size_t> remote_idx, fetch_idx;  // into wanted: computed on the owner / with its weights here
  for (int e = 0; e < E; ++e) {
    if (uses[e].rows.empty()) continue;
    const int64_t n_rows = static_cast<int64_t>(uses[e].rows.size());
    const auto where = remote_ != nullptr ? remote_->Place(layer_id, e, n_rows) : RemoteExperts::Placement::kLocal;
    if (where == RemoteExperts::Placement::kFetch) {
      fetch_idx.push_back(wanted.size());
      wanted.push_back({layer_id, e});
      continue;
    }
    if (where == RemoteExperts::Placement::kRemote) {
      remote_idx.push_back(wanted.size());
      remote_jobs.push_back({e, uses[e].rows});
      wanted.push_back({layer_id, e});
      continue;
    }
    (decode_use[e] ? decode_idx : prefill_idx).push_back(wanted.size());
    wanted.push_back({layer_id, e});
    if (decode_use[e]) hinted.push_back({layer_id, e});
  }
  // The remote calls go out first: the network overlaps everything below.
  std::unique_ptr<RemoteExpertCall> remote_call;
  if (!remote_jobs.empty()) remote_call = remote_->Start(layer_id, x, S, H, remote_jobs);
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
  // so the arrival order never changes the result; nor does where it ran.
  std::vector<float> slot(S * K * H, 0.0f);
  // Writes expert `e`'s outputs y [its rows, H] into its slots.
  auto place = [&](int e, const float* y) {
    const Uses& u = uses[e];
    for (size_t i = 0; i < u.rows.size(); ++i) {
      float* dst = slot.data() + u.slots[i] * H;
      for (int64_t d = 0; d < H; ++d) dst[d] = y[i * H + d] * u.weights[i];
    }
  };
  // expert_fetch: the time GetEach blocked, i.e. its wall time minus the
  // expert compute done in the callback as leases arrive.
  using Clock = std::chrono::steady_clock;
  const Clock::time_point fetch_t0 = Clock::now();
  double in_ready_s = 0;
  std::vector<float> y;
  auto compute = [&](size_t index, ExpertLease lease) -> absl::Status {
    const Clock::time_point ready_t0 = Clock::now();
    const ExpertKey key = wanted[index];
    const std::vector<int64_t>& rows = uses[key.expert].rows;
    y.resize(rows.size() * H);
    MOE_RETURN_IF_ERROR(ExpertRows(key, lease.weights(), x, rows, y.data()));
    place(key.expert, y.data());
    in_ready_s += std::chrono::duration<double>(Clock::now() - ready_t0).count();
    return absl::OkStatus();
  };
  auto fetch_and_compute = [&](const std::vector<size_t>& which, FetchUse use) -> absl::Status {
    if (which.empty()) return absl::OkStatus();
    std::vector<int> ids;
    for (size_t i : which) ids.push_back(wanted[i].expert);
    return experts_->GetEach(
        layer_id, ids, [&](size_t j, ExpertLease lease) { return compute(which[j], std::move(lease)); }, use);
  };
  absl::Status local = fetch_and_compute(decode_idx, FetchUse::kDecode);
  if (local.ok()) local = fetch_and_compute(prefill_idx, FetchUse::kPrefill);
  std::vector<size_t> fallback;  // owners that failed: computed from this host's source
  for (size_t i : fetch_idx) {
    if (!local.ok()) break;
    absl::StatusOr<ExpertLease> lease = remote_->FetchWeights(layer_id, wanted[i].expert);
    if (lease.ok()) {
      local = compute(i, std::move(*lease));
    } else {
      fallback.push_back(i);
    }
  }
  if (remote_call) {
    // Always waited for (x and the jobs must outlive the calls), even after a local error.
    std::vector<std::vector<float>> got = remote_call->Wait();
    MOE_RETURN_IF_ERROR(local);
    for (size_t j = 0; j < remote_jobs.size(); ++j) {
      const int64_t n = static_cast<int64_t>(remote_jobs[j].rows.size());
      if (j < got.size() && static_cast<int64_t>(got[j].size()) == n * H) {
        place(remote_jobs[j].expert, got[j].data());
      } else {
        fallback.push_back(remote_idx[j]);
      }
    }
  }
  if (local.ok()) local = fetch_and_compute(fallback, FetchUse::kDecode);
  MOE_RETURN_IF_ERROR(local);
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

absl::Status Model::ExpertRows(const ExpertKey& key, const ExpertWeights& ew, const float* x,
                              std::span<const int64_t> rows, float* y) const {
  const int64_t H = config_.hidden_size, Im = config_.moe_intermediate_size;
  if (ew.gate.rows != Im || ew.gate.cols != H || ew.up.rows != Im || ew.up.cols != H || ew.down.rows != H ||
      ew.down.cols != Im) {
    return absl::InvalidArgumentError(absl::StrCat("expert (layer ", key.layer, ", id ", key.expert,
                                                   ") has wrong shapes"));
  }
  const int64_t n = static_cast<int64_t>(rows.size());
  std::vector<float> xin(n * H), g(n * Im), u(n * Im);
  for (int64_t i = 0; i < n; ++i) std::memcpy(xin.data() + i * H, x + rows[i] * H, H * sizeof(float));
  Mm(ew.gate, xin.data(), n, g.data());
  Mm(ew.up, xin.data(), n, u.data());
  for (int64_t i = 0; i < n * Im; ++i) g[i] = R(R(Silu(R(g[i]))) * R(u[i]));
  Mm(ew.down, g.data(), n, y);
  for (int64_t i = 0; i < n * H; ++i) y[i] = R(y[i]);
  return absl::OkStatus();
}

absl::Status Model::CheckRoutedExpert(int layer, int expert) const {
  const ModelConfig& c = config_;
  const bool is_mtp = layer == c.num_hidden_layers && has_mtp();
  if (layer < c.first_k_dense_replace || (layer >= c.num_hidden_layers && !is_mtp)) {
    return absl::InvalidArgumentError(absl::StrCat("layer ", layer, " has no routed experts (MoE layers: ",
                                                   c.first_k_dense_replace, "..", c.num_hidden_layers - 1,
                                                   has_mtp() ? absl::StrCat(" and MTP ", c.num_hidden_layers) : "",
                                                   ")"));
  }
  if (expert < 0 || expert >= c.n_routed_experts) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert ", expert, " out of range (the model has ", c.n_routed_experts, ")"));
  }
  return absl::OkStatus();
}

absl::Status Model::RunExperts(int layer, const float* x, int64_t n_rows, std::span<const RemoteExpertJob> jobs,
                               std::vector<std::vector<float>>& outputs) const {
  const int64_t H = config_.hidden_size;
  std::vector<int> ids;
  for (const RemoteExpertJob& j : jobs) {
    MOE_RETURN_IF_ERROR(CheckRoutedExpert(layer, j.expert));
    for (int64_t r : j.rows) {
      if (r < 0 || r >= n_rows) {
        return absl::InvalidArgumentError(absl::StrCat("row ", r, " of expert ", j.expert, " out of range (",
                                                       n_rows, " rows sent)"));
      }
    }
    ids.push_back(j.expert);
  }
  outputs.assign(jobs.size(), {});
  return experts_->GetEach(
      layer, ids,
      [&](size_t j, ExpertLease lease) {
        outputs[j].resize(jobs[j].rows.size() * H);
        return ExpertRows({layer, jobs[j].expert}, lease.weights(), x, jobs[j].rows, outputs[j].data());
      },
      FetchUse::kDecode);
}

}  // namespace moe
