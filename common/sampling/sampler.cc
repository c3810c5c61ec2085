#include "common/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace moe {

absl::Status CheckSampleParams(const SampleParams& p) {
  auto bad = [](const char* name, const char* range, float v) {
    return absl::InvalidArgumentError(absl::StrCat(name, " must be ", range, ", got ", v));
  };
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) return bad("temperature", ">= 0", p.temperature);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return bad("top_p", "in (0, 1]", p.top_p);
  if (p.top_k < 0) return bad("top_k", ">= 0", static_cast<float>(p.top_k));
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return bad("min_p", "in [0, 1]", p.min_p);
  if (!std::isfinite(p.presence_penalty)) return bad("presence_penalty", "finite", p.presence_penalty);
  if (!std::isfinite(p.frequency_penalty)) return bad("frequency_penalty", "finite", p.frequency_penalty);
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty)) {
    return bad("repetition_penalty", "> 0 and finite", p.repetition_penalty);
  }
  return absl::OkStatus();
}

Rng KeyedRng(uint64_t seed, int64_t index) {
  auto mix = [](uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  return Rng(mix(mix(seed) ^ static_cast<uint64_t>(index)));
}

SampleResult Sample(std::span<const float> logits, const SampleParams& p,
                    const std::unordered_map<int32_t, int32_t>& counts, int32_t top_logprobs, Rng& rng,
                    const SampleOptions& opt) {
  const int64_t V = static_cast<int64_t>(logits.size());
  SampleResult r;
  // Raw log-softmax for reporting.
  double mx = -std::numeric_limits<double>::infinity();
  for (float v : logits) mx = std::max(mx, static_cast<double>(v));
  double z = 0;
  for (float v : logits) z += std::exp(static_cast<double>(v) - mx);
  const double lse = mx + std::log(z);

  std::vector<float> l(logits.begin(), logits.end());
  if (p.repetition_penalty != 1.0f && !opt.seen.empty()) {
    std::vector<bool> done(V, false);
    for (int32_t tok : opt.seen) {
      if (tok < 0 || tok >= V || done[tok]) continue;
      done[tok] = true;
      l[tok] = l[tok] > 0 ? l[tok] / p.repetition_penalty : l[tok] * p.repetition_penalty;
    }
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    for (const auto& [tok, n] : counts) {
      if (tok >= 0 && tok < V && n > 0) l[tok] -= p.frequency_penalty * n + p.presence_penalty;
    }
  }
  for (const auto& [tok, bias] : opt.logit_bias) {
    if (tok >= 0 && tok < V) l[tok] += bias;
  }
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (!opt.allowed.empty() || !opt.banned.empty()) {
    std::vector<bool> banned(opt.banned.empty() ? 0 : V, false);
    for (int32_t tok : opt.banned) {
      if (tok >= 0 && tok < V) banned[tok] = true;
    }
    bool any_left = false;
    for (int64_t i = 0; i < V; ++i) {
      const bool legal = opt.allowed.empty() || MaskAllows(opt.allowed, static_cast<int32_t>(i));
      if (!legal) {
        l[i] = kNegInf;
      } else if (!banned.empty() && banned[i]) {
        continue;  // decided below: banned only while something else is legal
      } else {
        any_left = true;
      }
    }
    if (any_left) {
      for (int64_t i = 0; i < static_cast<int64_t>(banned.size()); ++i) {
        if (banned[i]) l[i] = kNegInf;
      }
    }
    // A legal token whose biased logit is -inf (logit_bias -100 on a huge scale cannot do
    // that; a -inf input logit can) still has to be drawable: lift legal -inf to the floor.
    bool finite = false;
    for (float v : l) finite = finite || std::isfinite(v);
    if (!finite) {
      for (int64_t i = 0; i < V; ++i) {
        if (opt.allowed.empty() || MaskAllows(opt.allowed, static_cast<int32_t>(i))) l[i] = 0.0f;
      }
    }
  }
  int32_t chosen = 0;
  if (p.temperature <= 0.0f) {
    chosen = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
  } else {
    const double inv_t = 1.0 / p.temperature;
    double lm = -std::numeric_limits<double>::infinity();
    for (float v : l) lm = std::max(lm, static_cast<double>(v));
    std::vector<double> prob(V);
    for (int64_t i = 0; i < V; ++i) prob[i] = std::exp((l[i] - lm) * inv_t);
    std::vector<int32_t> idx(V);
    std::iota(idx.begin(), idx.end(), 0);
    int64_t keep = V;
    const bool need_sort = (p.top_k > 0 && p.top_k < V) || p.top_p < 1.0f;
    if (need_sort) {
      // Stable order (prob desc, id asc) so ties resolve the same everywhere.
      auto cmp = [&](int32_t a, int32_t b) { return prob[a] > prob[b] || (prob[a] == prob[b] && a < b); };
      if (p.top_p < 1.0f) {
        std::sort(idx.begin(), idx.end(), cmp);
      } else {
        std::partial_sort(idx.begin(), idx.begin() + p.top_k, idx.end(), cmp);
      }
      if (p.top_k > 0 && p.top_k < keep) keep = p.top_k;
      if (p.top_p < 1.0f) {
        double total = 0;
        for (int64_t i = 0; i < keep; ++i) total += prob[idx[i]];
        double cum = 0;
        int64_t k = 0;
        while (k < keep) {
          cum += prob[idx[k]];
          ++k;
          if (cum >= p.top_p * total) break;
        }
        keep = std::max<int64_t>(k, 1);
      }
    }
    if (p.min_p > 0.0f) {
      double pmax = 0;
      for (int64_t i = 0; i < keep; ++i) pmax = std::max(pmax, prob[idx[i]]);
      int64_t w = 0;
      for (int64_t i = 0; i < keep; ++i) {
        if (prob[idx[i]] >= p.min_p * pmax) idx[w++] = idx[i];
      }
      keep = std::max<int64_t>(w, 1);
    }
    double total = 0;
    for (int64_t i = 0; i < keep; ++i) total += prob[idx[i]];
    // 53-bit uniform in [0, 1) from the sequence's generator.
    double u = static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0) * total;
    chosen = idx[0];
    for (int64_t i = keep; i-- > 0;) {  // rounding fallback: the last candidate that can be drawn
      if (prob[idx[i]] > 0) {
        chosen = idx[i];
        break;
      }
    }
    double cum = 0;
    for (int64_t i = 0; i < keep; ++i) {
      cum += prob[idx[i]];
      if (u < cum) {
        chosen = idx[i];
        break;
      }
    }
  }
  r.token = chosen;
  r.logprob = static_cast<float>(logits[chosen] - lse);
  if (top_logprobs > 0) {
    int64_t k = std::min<int64_t>(top_logprobs, V);
    std::vector<int32_t> idx(V);
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (int64_t i = 0; i < k; ++i) r.top.emplace_back(idx[i], static_cast<float>(logits[idx[i]] - lse));
  }
  return r;
}

}  // namespace moe
