#include "common/expertstore/cache_sim.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <list>
#include <numeric>
#include <random>
#include <set>
#include <unordered_map>
#include <utility>

namespace moe::expertstore {

namespace {

// The resident keys of a simulated cache: O(1) membership, insert and
// removal by position (the sampled-eviction sims pick victims by position).
class ResidentSet {
 public:
  explicit ResidentSet(size_t num_keys) : pos_(num_keys, -1) {}
  bool Has(uint32_t k) const { return pos_[k] >= 0; }
  size_t size() const { return keys_.size(); }
  uint32_t at(size_t i) const { return keys_[i]; }
  void Add(uint32_t k) {
    pos_[k] = int64_t(keys_.size());
    keys_.push_back(k);
  }
  void Remove(uint32_t k) { RemoveAt(size_t(pos_[k])); }
  void RemoveAt(size_t i) {
    pos_[keys_[i]] = -1;
    if (i + 1 != keys_.size()) {
      keys_[i] = keys_.back();
      pos_[keys_[i]] = int64_t(i);
    }
    keys_.pop_back();
  }

 private:
  std::vector<int64_t> pos_;
  std::vector<uint32_t> keys_;
};

// Position of the key to evict: the first in `evict_before` order among all
// residents when there are at most `sample`, else among `sample` random ones.
template <class EvictBefore>
size_t PickVictim(const ResidentSet& res, int sample, std::mt19937_64& rng, EvictBefore evict_before) {
  size_t best = rng() % res.size();
  if (res.size() <= size_t(sample)) {
    for (size_t j = 0; j < res.size(); ++j)
      if (evict_before(res.at(j), res.at(best))) best = j;
  } else {
    for (int i = 1; i < sample; ++i) {
      size_t j = rng() % res.size();
      if (evict_before(res.at(j), res.at(best))) best = j;
    }
  }
  return best;
}

}  // namespace

RoutingTrace MakeSyntheticTrace(const SyntheticTraceConfig& c) {
  RoutingTrace t;
  t.num_layers = c.num_layers;
  t.num_experts = c.num_experts;
  t.top_k = std::min(c.top_k, c.num_experts);
  t.num_tokens = c.num_tokens;
  std::mt19937_64 rng(c.seed);  // popularity and phases
  std::mt19937_64 draw(c.draw_seed ? c.draw_seed : c.seed * 0x9e3779b97f4a7c15ull + 1);
  std::vector<double> weight(c.num_experts);
  for (uint32_t r = 0; r < c.num_experts; ++r) weight[r] = 1.0 / std::pow(double(r + 1), c.zipf_s);
  // perm[layer][rank] = expert
  std::vector<std::vector<uint32_t>> perm(c.num_layers, std::vector<uint32_t>(c.num_experts));
  for (auto& p : perm) {
    std::iota(p.begin(), p.end(), 0u);
    std::shuffle(p.begin(), p.end(), rng);
  }
  std::vector<std::vector<uint32_t>> prev(c.num_layers);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<uint8_t> chosen(c.num_experts);
  t.keys.reserve(size_t(c.num_tokens) * c.num_layers * t.top_k);
  for (uint32_t tok = 0; tok < c.num_tokens; ++tok) {
    if (c.phase_tokens && tok > 0 && tok % c.phase_tokens == 0) {
      for (auto& p : perm) {
        for (uint32_t r = 0; r < c.num_experts; ++r) {
          if (u(rng) < c.phase_shuffle) std::swap(p[r], p[rng() % c.num_experts]);
        }
      }
    }
    for (uint32_t l = 0; l < c.num_layers; ++l) {
      std::fill(chosen.begin(), chosen.end(), 0);
      std::vector<uint32_t> cur;
      for (uint32_t e : prev[l]) {
        if (cur.size() < t.top_k && u(draw) < c.keep_prob) {
          cur.push_back(e);
          chosen[e] = 1;
        }
      }
      std::discrete_distribution<uint32_t> pick(weight.begin(), weight.end());
      while (cur.size() < t.top_k) {
        uint32_t e = perm[l][pick(draw)];
        if (!chosen[e]) {
          chosen[e] = 1;
          cur.push_back(e);
        }
      }
      for (uint32_t e : cur) t.keys.push_back(l * c.num_experts + e);
      prev[l] = std::move(cur);
    }
  }
  return t;
}

void AddLookahead(RoutingTrace& t, double accuracy, uint64_t seed) {
  const size_t K = t.top_k, rows = K ? t.keys.size() / K : 0;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  t.ahead.assign(rows, {});
  for (size_t r = 0; r + 1 < rows; ++r) {
    const uint32_t layer = t.keys[r * K] / t.num_experts, next = t.keys[(r + 1) * K] / t.num_experts;
    if (next != layer + 1) continue;  // the next row belongs to the next token
    const uint32_t* truth = &t.keys[(r + 1) * K];
    auto& pred = t.ahead[r];
    for (size_t j = 0; j < K; ++j) {
      uint32_t k = truth[j];
      if (u(rng) >= accuracy && t.num_experts > K) {
        do k = next * t.num_experts + uint32_t(rng() % t.num_experts);
        while (std::find(truth, truth + K, k) != truth + K);
      }
      if (std::find(pred.begin(), pred.end(), k) == pred.end()) pred.push_back(k);
    }
  }
}

SimResult SimulateLru(const RoutingTrace& t, uint64_t slots) {
  SimResult r;
  std::list<uint32_t> lru;  // front = most recent
  std::unordered_map<uint32_t, std::list<uint32_t>::iterator> pos;
  for (uint32_t k : t.keys) {
    ++r.accesses;
    auto it = pos.find(k);
    if (it != pos.end()) {
      ++r.hits;
      lru.splice(lru.begin(), lru, it->second);
      continue;
    }
    if (slots == 0) continue;
    if (lru.size() >= slots) {
      pos.erase(lru.back());
      lru.pop_back();
    }
    lru.push_front(k);
    pos[k] = lru.begin();
  }
  return r;
}

SimResult SimulateHeat(const RoutingTrace& t, uint64_t slots, PolicyConfig c, const ReplayOptions& o) {
  SimResult r;
  c.accesses_per_token = AccessesPerToken(t);
  HeatPolicy p(t.num_layers, t.num_experts, c);
  if (o.warm_heat) {
    r.status = p.Restore(*o.warm_heat, kReplayModelId, "warm heat");
    if (!r.status.ok()) return r;
  }
  const int sample = o.sample;
  const uint64_t harvest_every = o.harvest_every;
  const bool row_leases = o.row_leases;
  ResidentSet res(size_t(t.num_layers) * t.num_experts);
  std::vector<uint32_t> unseen_hits(harvest_every ? size_t(t.num_layers) * t.num_experts : 0, 0);
  std::mt19937_64 rng(7);
  using Clock = std::chrono::steady_clock;
  double touch_ns = 0, evict_ns = 0;
  auto touch = [&](uint32_t k, double count) {
    const auto t0 = o.time_policy ? Clock::now() : Clock::time_point{};
    p.Touch(k, count);
    if (res.size()) p.Observe(res.at(rng() % res.size()));  // a resident key to learn from
    if (o.time_policy) touch_ns += std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
  };
  const size_t K = std::max<uint32_t>(1, t.top_k);
  for (uint32_t k : t.keys) {
    if (r.accesses % K == 0 && r.accesses / K < t.ahead.size())
      for (uint32_t q : t.ahead[r.accesses / K]) p.Expect(q);
    ++r.accesses;
    if (harvest_every && r.accesses % harvest_every == 0) {
      for (uint32_t q = 0; q < unseen_hits.size(); ++q)
        if (unseen_hits[q]) touch(q, std::exchange(unseen_hits[q], 0));
    }
    if (res.Has(k)) {
      ++r.hits;
      if (harvest_every)
        ++unseen_hits[k];
      else
        touch(k, 1);
      continue;
    }
    touch(k, 1);
    if (slots == 0) continue;
    if (res.size() >= slots) {
      const size_t row0 = (r.accesses - 1) / K * K, row1 = std::min(t.keys.size(), row0 + K);
      // Row leases: the row's keys are never victims (slots >= top_k).
      auto leased = [&](uint32_t q) {
        return row_leases && std::find(&t.keys[row0], &t.keys[row1], q) != &t.keys[row1];
      };
      if (!c.learned) {  // expertd's decision: the policy's exact order over every resident
        const auto t0 = o.time_policy ? Clock::now() : Clock::time_point{};
        const int64_t v = p.EvictFirst([&](uint32_t q, double) {
          return leased(q) ? HeatPolicy::Offer::kBusy : HeatPolicy::Offer::kTaken;
        });
        if (o.time_policy) {
          evict_ns += std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
          ++r.decisions;
        }
        if (v >= 0) res.Remove(uint32_t(v));
      } else {
        const size_t v = PickVictim(res, sample, rng, [&](uint32_t a, uint32_t b) {
          const bool la = leased(a), lb = leased(b);
          return la != lb ? lb : p.EvictBefore(a, b);
        });
        p.Evicted(res.at(v));
        res.RemoveAt(v);
      }
    }
    res.Add(k);
    p.Filled(k);
  }
  if (o.time_policy) {
    // What a timed call reads with nothing inside (two back-to-back
    // steady_clock reads), taken off every timed call.
    constexpr int kPairs = 100000;
    double pairs = 0;
    for (int i = 0; i < kPairs; ++i) {
      const auto a = Clock::now();
      pairs += std::chrono::duration<double, std::nano>(Clock::now() - a).count();
    }
    const double pair_ns = pairs / kPairs;
    r.timer_ns = pair_ns;
    r.touch_ns = r.accesses ? std::max(0.0, touch_ns / double(r.accesses) - pair_ns) : 0.0;
    r.evict_ns = r.decisions ? std::max(0.0, evict_ns / double(r.decisions) - pair_ns) : 0.0;
  }
  if (c.learned) r.weights.assign(p.weights(), p.weights() + HeatPolicy::kFeatures);
  r.heat = p.Snapshot(kReplayModelId);
  const uint32_t n = t.num_layers * t.num_experts;
  double sink = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int rep = 0; rep < 8; ++rep)
    for (uint32_t k = 0; k < n; ++k) sink += c.learned ? p.Score(k) : p.LiveScore(k);
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  r.score_ns = n ? ns / (8.0 * n) : 0.0;
  if (res.size() > 0) {
    // One decision on the final state as expertd makes it (EvictFirst; the
    // key offered first is refused with kStop, so nothing changes), and the
    // scan it replaced (one Score per resident, the lowest taken).
    const int reps = std::max<int>(64, int(2000000 / res.size()));
    int64_t pick = 0;
    const auto d0 = std::chrono::steady_clock::now();
    for (int rep = 0; rep < reps; ++rep)
      pick += p.EvictFirst([](uint32_t, double) { return HeatPolicy::Offer::kStop; });
    const auto d1 = std::chrono::steady_clock::now();
    auto score = [&](uint32_t k) { return c.learned ? p.Score(k) : p.LiveScore(k); };
    for (int rep = 0; rep < reps / 16 + 1; ++rep) {
      size_t best = 0;
      double best_score = score(res.at(0));
      for (size_t j = 1; j < res.size(); ++j) {
        const double sc = score(res.at(j));
        if (sc < best_score || (sc == best_score && p.last_access(res.at(j)) < p.last_access(res.at(best)))) {
          best = j;
          best_score = sc;
        }
      }
      pick += int64_t(best);
    }
    const auto d2 = std::chrono::steady_clock::now();
    r.decision_ns = std::chrono::duration<double, std::nano>(d1 - d0).count() / double(reps);
    r.scan_ns = std::chrono::duration<double, std::nano>(d2 - d1).count() / double(reps / 16 + 1);
    r.decision_candidates = res.size();
    sink += double(pick);
  }
  [[maybe_unused]] volatile double keep = sink;  // the scores must be computed
  return r;
}

SimResult SimulateBelady(const RoutingTrace& t, uint64_t slots, bool bypass) {
  SimResult r;
  const size_t n = t.keys.size();
  constexpr uint64_t kNever = ~0ull;
  std::vector<uint64_t> next(n);
  std::unordered_map<uint32_t, uint64_t> seen;
  for (size_t i = n; i-- > 0;) {
    auto it = seen.find(t.keys[i]);
    next[i] = it == seen.end() ? kNever : it->second;
    seen[t.keys[i]] = i;
  }
  std::set<std::pair<uint64_t, uint32_t>> by_next;  // (next use, key); rbegin = victim
  std::unordered_map<uint32_t, uint64_t> cur_next;
  for (size_t i = 0; i < n; ++i) {
    uint32_t k = t.keys[i];
    ++r.accesses;
    auto it = cur_next.find(k);
    if (it != cur_next.end()) {
      ++r.hits;
      by_next.erase({it->second, k});
      it->second = next[i];
      by_next.insert({next[i], k});
      continue;
    }
    if (slots == 0) continue;
    if (by_next.size() >= slots) {
      auto victim = std::prev(by_next.end());
      // Bypass: if the incoming key is used later than every resident one, don't admit it.
      if (bypass && victim->first <= next[i]) continue;
      cur_next.erase(victim->second);
      by_next.erase(victim);
    }
    cur_next[k] = next[i];
    by_next.insert({next[i], k});
  }
  return r;
}

SimResult SimulateNearFuture(const RoutingTrace& t, uint64_t slots, uint64_t future_rows, PolicyConfig c) {
  SimResult r;
  c.accesses_per_token = AccessesPerToken(t);
  HeatPolicy p(t.num_layers, t.num_experts, c);
  const size_t n = t.keys.size(), K = std::max<uint32_t>(1, t.top_k);
  constexpr uint64_t kNever = ~0ull;
  std::vector<uint64_t> next(n);  // index of the next access of the same key
  {
    std::unordered_map<uint32_t, uint64_t> seen;
    for (size_t i = n; i-- > 0;) {
      auto it = seen.find(t.keys[i]);
      next[i] = it == seen.end() ? kNever : it->second;
      seen[t.keys[i]] = i;
    }
  }
  std::vector<uint64_t> next_use(size_t(t.num_layers) * t.num_experts, kNever);  // per key, from its last access
  ResidentSet res(next_use.size());
  std::mt19937_64 rng(7);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t k = t.keys[i];
    ++r.accesses;
    p.Touch(k, 1);
    next_use[k] = next[i];
    if (res.Has(k)) {
      ++r.hits;
      continue;
    }
    if (slots == 0) continue;
    if (res.size() >= slots) {
      // The window ends with the last access of row (current row + future_rows).
      const uint64_t end = std::min<uint64_t>(n, (i / K + 1 + future_rows) * K);
      auto seen_soon = [&](uint32_t q) { return next_use[q] < end; };
      // Our order (EvictFirst, as expertd) over the keys unused in the
      // window; if every resident is used in it, the one used last.
      int64_t latest = -1;
      int64_t v = p.EvictFirst([&](uint32_t q, double) {
        if (!seen_soon(q)) return HeatPolicy::Offer::kTaken;
        if (latest < 0 || next_use[q] > next_use[uint32_t(latest)]) latest = q;
        return HeatPolicy::Offer::kBusy;
      });
      if (v < 0 && latest >= 0) {
        v = latest;
        p.Evicted(uint32_t(v));
      }
      if (v >= 0) res.Remove(uint32_t(v));
    }
    res.Add(k);
    p.Filled(k);
  }
  return r;
}

SimResult SimulateStaticBest(const RoutingTrace& t, uint64_t slots) {
  SimResult r;
  std::vector<uint64_t> count(size_t(t.num_layers) * t.num_experts, 0);
  for (uint32_t k : t.keys) ++count[k];
  std::vector<uint32_t> order(count.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return count[a] > count[b]; });
  for (size_t i = 0; i < order.size() && i < slots; ++i) r.hits += count[order[i]] ? count[order[i]] - 1 : 0;
  r.accesses = t.keys.size();
  return r;
}

SimResult SimulateInformed(const RoutingTrace& t, uint64_t slots, const SyntheticTraceConfig& c, int replicates,
                           int sample, bool phase_counts, double later_weight) {
  SimResult r;
  const uint32_t E = t.num_experts, K = t.top_k;
  const size_t per_token = size_t(t.num_layers) * K, nkeys = size_t(t.num_layers) * E;
  const uint32_t phase_tokens = c.phase_tokens ? c.phase_tokens : std::max<uint32_t>(1, t.num_tokens);
  const double keep_prob = c.keep_prob;
  const size_t phases = t.num_tokens / phase_tokens + 1;
  std::vector<float> freq(phases * nkeys, 0.f);  // [phase][key]: expected uses per token in that phase
  replicates = phase_counts ? 0 : std::max(1, replicates);  // phase_counts: nothing told but the phase starts
  for (int rep = 0; rep < replicates; ++rep) {
    SyntheticTraceConfig o = c;
    o.draw_seed = (c.draw_seed ? c.draw_seed : c.seed * 0x9e3779b97f4a7c15ull + 1) + 1000003ull * uint64_t(rep + 1);
    const RoutingTrace other = MakeSyntheticTrace(o);
    for (size_t i = 0; i < other.keys.size(); ++i)
      freq[(i / per_token) / phase_tokens * nkeys + other.keys[i]] += 1.f / float(phase_tokens * replicates);
  }
  std::vector<uint64_t> last(nkeys, ~0ull);
  ResidentSet res(nkeys);
  std::mt19937_64 rng(7);
  // phase_counts: p is instead this phase's counts so far (the previous
  // phase's frequency as a prior worth kPrior tokens), updated as the trace runs.
  constexpr float kPrior = 50;
  std::vector<float> cnt(phase_counts ? nkeys : 0, 0.f), prevp(cnt.size(), 0.f);
  size_t phase_start = 0;
  for (size_t i = 0; i < t.keys.size(); ++i) {
    const uint32_t k = t.keys[i];
    const size_t tok = i / per_token, cur_layer = (i % per_token) / K;
    if (phase_counts) {
      if (i % per_token == 0 && tok % phase_tokens == 0 && tok > 0) {
        const float n = float(tok - phase_start);
        for (size_t q = 0; q < nkeys; ++q) prevp[q] = cnt[q] / n, cnt[q] = 0;
        phase_start = tok;
      }
      cnt[k] += 1;
      const float n = float(tok - phase_start) + 1;
      float* pp = &freq[tok / phase_tokens * nkeys];
      for (uint32_t q = k / E * E; q < k / E * E + E; ++q) pp[q] = (cnt[q] + prevp[q] * kPrior) / (n + kPrior);
    }
    last[k] = i;
    ++r.accesses;
    if (res.Has(k)) {
      ++r.hits;
      continue;
    }
    if (slots == 0) continue;
    if (res.size() >= slots) {
      const float* p = &freq[tok / phase_tokens * nkeys];
      auto likely = [&](uint32_t q) {
        const size_t l = q / E;
        // Start of its layer's most recent visit (this token's if already reached).
        const size_t visit = l <= cur_layer ? tok * per_token + l * K : (tok ? (tok - 1) * per_token + l * K : 0);
        const bool reused = last[q] != ~0ull && last[q] >= visit && last[q] < visit + K;
        const double q1 = reused ? keep_prob + (1 - keep_prob) * p[q] : p[q];
        return q1 + later_weight * p[q];
      };
      res.RemoveAt(PickVictim(res, sample, rng, [&](uint32_t a, uint32_t b) { return likely(a) < likely(b); }));
    }
    res.Add(k);
  }
  return r;
}

}  // namespace moe::expertstore
