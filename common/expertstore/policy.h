// HeatPolicy: which experts stay in the arena.
//
// Problem in numbers: GLM-5 reads 600 of 19,200 experts per token; a 12 GiB
// budget holds ~650. Plain LRU reached 68.4% hits where Belady's optimum
// reached 84.1% on one published trace; popular experts are reused across
// many tokens, so frequency matters, but routing drifts with the topic, so
// old counts must fade.
//
// Heat is an exponentially decayed access count (half-life `slow_tokens`
// tokens: which experts this workload keeps using) plus a recency bonus
// alpha for keys used within the last `window_tokens` tokens (the experts of
// the last token, which routing reuses far above their base rate); the
// older form, a second decayed count with half-life `fast_tokens` weighted
// by alpha (LRFU), is kept behind window_tokens = 0. The decayed count is an
// adaptive window by default (change_z): a steadier 256-token count unless
// the 64-token one says the expert's popularity changed. Eviction takes
// the lowest score among unleased, unpinned slabs (ties: least recently
// used). On skewed GLM-5-shaped traces this beats LRU by several points of
// hit rate (docs/BENCHMARKS.md ## expertd). Pinned keys are never evicted.
// Admission for speculative fills (prefetch): a fill may only evict a key
// whose score is below the score the incoming key would have after one
// access (a prefetch never evicts an expert hotter than what it brings).
// Hints keep: an expert named by a look-ahead or current-routing hint is
// evicted after every unnamed one until its layer's next visit begins
// (Expect), so a layer's fills do not evict what the next layer will ask for.
//
// Learned eviction order (opt-in, `learned`): the heat score above is one
// fixed guess at "will this expert be used again soon"; which signal matters
// depends on the workload (random-weight tiny models: frequency; sticky
// routing: the last token; GLM-5: both, plus where the layer stands in the
// token's cycle of 75 layers). So the eviction score is instead a logistic
// model, trained online, of P(key is used within the cache's horizon) from
// nine features: decayed counts at three half-lives (4, 64, 512 tokens; log)
// and the 64-token count itself (linear), used in its layer's last visit,
// time since last use, how far the layer's next visit is, the product of
// those two, and a bias. Training samples are random
// resident keys (Observe), labelled 1 if used again within the horizon (the
// mean age of evicted keys: what "soon" means for this budget), else 0 -
// the relaxed-Belady target of LRB (Song et al., NSDI '20), with a linear
// model instead of boosted trees. On recorded tiny-model traces it closes
// 10-18 more points of the LRU->Belady gap than the heat score at 31-50%
// budgets and ties it on the synthetic GLM-5-shaped trace in replay
// (docs/BENCHMARKS.md ## expertd). Not the default: it lost to the heat
// score end to end (2 x 64 GLM-5-shaped slice, 10% budget: 23.8% vs 30.9%
// hits). The replay reproduces that loss once it leases a row's hits while
// the row's misses fill, as that bench's worker does, and runs as few
// tokens as one bench row (40-160): the victims it learns to prefer (keys
// the row just used) are leased, and it needs hundreds of tokens to
// converge; over 2,400 tokens it wins there too.
//
// Eviction decisions (EvictFirst, used by expertd's ExpertStore and by the
// replay alike): the policy keeps the resident keys (Filled / Evicted /
// Removed) per layer, sorted by a rank = the heat score as of the key's last
// access or the end of its layer's latest visit, whichever came later (each
// layer is re-ranked when a visit of it ends, and at least once per token).
// On a layer cycle a key's score only moves at its layer's visits (its
// recency step starts and ends there; one token of decay at a 64-token
// half-life is 1%), so a decision takes the lowest head over the layers'
// lists: ~80 candidates at GLM-5's 76 routed layers instead of a score per
// resident slab (1,946 at 10% of its 19,456 experts: ~60 us per miss).
// The learned order's scores move continuously; it scans every resident.
//
// Heat (the decayed count; the learned weights too) persists in a file
// tagged with the model identity; loading a file of another model is refused with
// FailedPrecondition (callers warn and start cold).
//
// Thread safety: none; the store serializes access.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace moe::expertstore {

struct PolicyConfig {
  double accesses_per_token = 600;  // MoE layers x top-k (GLM-5: 75 x 8)
  double slow_tokens = 64;          // half-life of the frequency term
  double fast_tokens = 0.5;         // half-life of the recency term
  // Weight of the recency term. The slow term counts ~slow_tokens/ln2 x the
  // per-token use probability, so alpha = 40 weighs "used in the last
  // token" like a ~0.4 chance of reuse (tuned on synthetic GLM-5 traces).
  double alpha = 40.0;
  // > 0 (default): the recency term is a step instead: alpha while the key
  // was used within the last `window_tokens` tokens, else 0 (fast_tokens
  // unused). Routing reuses an expert of the previous token far above its
  // base rate, and barely after that: the exponential term kept boosting
  // keys two or three tokens old over frequently used ones (bench cache on
  // synthetic GLM-5 traces, 10% budget: 62.6% -> 63.1% hits; 0 = exponential).
  double window_tokens = 1.0;
  // Step recency only: learn alpha from the workload instead (alpha is the
  // start value). The bonus is the measured excess chance that a key is used
  // again within the window over what its decayed count predicts, in count
  // units: a trace with strong token-to-token reuse (synthetic GLM-5: 35% of
  // experts repeat) gets a large bonus, one whose reuse the frequency already
  // explains (random-weight tiny models) a small one.
  bool adaptive_alpha = true;
  // Eviction order from the online-learned model (see the header comment);
  // false (default) = the heat score (decayed count + recency bonus).
  bool learned = false;
  double learn_rate = 0.01;
  // Heat score's frequency term, > 0 (default): an adaptive window. The rate
  // of a steady count (half-life steady_tokens: more uses, a less noisy
  // estimate) unless the slow count disagrees with it by more than change_z
  // Poisson standard deviations (the expert's popularity changed), then the
  // slow count's rate. Near the cut of a 30-50% budget an expert is used
  // only a few times per half-life, so one use more or less reorders it; the
  // steady count halves that noise (+2 points of the LRU->Belady gap at
  // 30-50% of the 2000-token synthetic trace). Both rates are over the part
  // of their window filled so far, in full-window units like the recency
  // bonus; the slow count alone was compared with the bonus as if its window
  // were full, over-weighting recency for the first ~100 tokens. Over the
  // slow count alone: +0..+5 points on 14 of the 15 recorded-trace rows of
  // docs/BENCHMARKS.md, -1 on one. 0: the slow count alone.
  double change_z = 0.5;
  double steady_tokens = 256;
};

class HeatPolicy {
 public:
  HeatPolicy(uint32_t num_layers, uint32_t num_experts, PolicyConfig c = {});

  uint32_t num_keys() const { return static_cast<uint32_t>(slow_.size()); }
  uint32_t index(int layer, int expert) const { return uint32_t(layer) * num_experts_ + uint32_t(expert); }
  uint64_t now() const { return now_; }
  double alpha() const { return alpha_; }
  bool learned() const { return cfg_.learned; }

  // One access (or `count` accesses at once, e.g. harvested shm hits).
  void Touch(uint32_t key, double count = 1.0);
  // Eviction score now: higher = keep. Learned: the model's logit of "used
  // within the horizon"; heat: decayed count + recency bonus (0 if never used);
  // + kExpectedBonus while Expected.
  double Score(uint32_t key) const;
  static constexpr double kExpectedBonus = 1e12;
  // Score the key would have after one more access (for admission of hints).
  double ScoreIfTouched(uint32_t key) const;
  // Decayed access count (half-life slow_tokens): what the admin RPC shows.
  double Heat(uint32_t key) const;

  // Router look-ahead: `key` is predicted for its layer's next visit. Until
  // that visit begins (the first access of the key's layer after the hint)
  // the key is evicted only after every unpredicted one: a fill for this
  // layer must not evict what the next layer is about to ask for (on a layer
  // cycle that is exactly what the frequency order tends to evict: the keys
  // whose layer comes next were used longest ago). Once the layer runs, its
  // true routing is known (the worker leases what it uses) and a wrong
  // prediction must not hold a slot: keeping keys through the visit lost
  // 2.5 points of hits where this gains 1.3 (bench cache, 2 x 64 synthetic,
  // 12 slots). Admission (ScoreIfTouched) ignores it, so a prefetch still
  // never evicts a hotter key.
  void Expect(uint32_t key);
  bool Expected(uint32_t key) const {
    const uint64_t e = expected_[key];
    return e != 0 && visit_start_[key / num_experts_] < e;
  }

  // Cache events: the resident set the eviction order covers, and what
  // trains the learned order (harmless when !learned): a random resident key
  // to learn from, and fills/evictions (their ages set the horizon).
  // Filled: `key` now holds a slab (filling or ready); Evicted: an eviction
  // decision took it; Removed: it left without one (a failed read, a slab
  // disabled by a smaller budget). Idempotent.
  void Observe(uint32_t key);
  void Filled(uint32_t key);
  void Evicted(uint32_t key);
  void Removed(uint32_t key);
  bool resident(uint32_t key) const { return pos_[key] >= 0; }
  size_t num_resident() const { return num_resident_; }
  // The heat score as of now (what a re-rank stores; Score gives a resident
  // key's rank).
  double LiveScore(uint32_t key) const { return HeatScore(key); }

  // One eviction decision: offers resident, unpinned keys to `take(key,
  // score)` in eviction order - lowest Score first, ties least recently used
  // first, keys a look-ahead hint keeps after every other - until it answers
  // kTaken (the caller evicted it: the policy drops it as Evicted and returns
  // it) or kStop (returns -1; e.g. admission refused, the rest are hotter);
  // kBusy (leased, filling, another size class) offers the next. -1 when no
  // key was taken. Heat order: a merge of the per-layer lists, O(layers +
  // offers x log layers); learned order: every resident scored.
  enum class Offer { kTaken, kBusy, kStop };
  template <class Take>
  int64_t EvictFirst(Take&& take);
  static constexpr int kFeatures = 9;
  const double* weights() const { return w_; }
  double horizon_tokens() const { return Horizon() / period_all_; }
  uint64_t last_access(uint32_t key) const { return last_[key]; }
  // True if a victim with score `victim_score` may be evicted for a fill of
  // `key`. A speculative fill is a prediction that comes true with
  // `precision`: it is worth the score it would have after its use that
  // often, and its present score otherwise (precision 1: as if certain).
  bool Admits(uint32_t key, bool speculative, double victim_score, double precision = 1.0) const {
    if (!speculative) return true;
    if (precision >= 1.0) return victim_score < ScoreIfTouched(key);
    const double now = Expected(key) ? Score(key) - kExpectedBonus : Score(key);
    return victim_score < precision * ScoreIfTouched(key) + (1.0 - precision) * now;
  }
  // Orders two candidates: true if a should be evicted before b (the order
  // EvictFirst offers resident keys in).
  bool EvictBefore(uint32_t a, uint32_t b) const {
    double sa = Score(a), sb = Score(b);
    return sa < sb || (sa == sb && last_[a] < last_[b]);
  }

  void SetPinned(uint32_t key, bool pinned);
  bool pinned(uint32_t key) const { return pinned_[key] != 0; }

  // The persisted state (the heat file's bytes): the decayed count, pins
  // and the learned weights. Restore refuses another model's or shape's
  // state (FailedPrecondition) and damaged bytes (DataLoss), naming `source`,
  // and changes nothing then. Save writes atomically (tmp + fsync + rename).
  std::string Snapshot(const std::string& model_id) const;
  absl::Status Restore(std::string_view bytes, const std::string& model_id, const std::string& source);
  absl::Status Save(const std::string& path, const std::string& model_id) const;
  absl::Status Load(const std::string& path, const std::string& model_id);

 private:
  uint32_t num_layers_, num_experts_;
  PolicyConfig cfg_;
  uint64_t now_ = 0;
  double slow_hl_, fast_hl_;  // in accesses
  double window_ = 0;         // in accesses (0: exponential recency)
  double alpha_ = 0;          // current recency bonus (cfg_.alpha or learned)
  double reuse_ = 0, base_ = 0, windows_ = 0;  // decayed: window reuses, predicted ones, windows
  std::vector<double> slow_, fast_;
  std::vector<uint64_t> last_;
  std::vector<uint8_t> pinned_;
  std::vector<uint64_t> expected_;  // per key: 1 + clock at its last look-ahead hint, 0 = none

  // Learned order.
  struct Sample {
    uint32_t key;
    uint64_t t0;
    bool live;
    double x[kFeatures];
  };
  double HeatScore(uint32_t key) const;
  double Freq(uint32_t key, double add) const;  // frequency term, slow-count units
  void Features(uint32_t key, bool touched, double* x) const;
  double Logit(const double* x) const;
  void Learn(const double* x, double label);
  double Horizon() const { return horizon_ > 0 ? horizon_ : 4 * period_all_; }
  void ExpireSamples();
  double quick_hl_, long_hl_;                 // in accesses
  std::vector<double> quick_, long_;          // decayed counts, half-lives 4 and 512 tokens
  double steady_hl_;                          // in accesses
  std::vector<double> steady_;                // decayed count, half-life steady_tokens
  bool counts_full_ = false;                  // counts loaded from a heat file: windows are full
  // The slow and steady counts' windows filled so far, in accesses: they
  // depend only on the clock, so they are set when it moves (or the counts
  // are restored full) rather than in every Freq of a victim scan.
  double window_slow_ = 0, window_steady_ = 0;
  void UpdateClockWindows();
  std::vector<uint64_t> filled_;
  std::vector<uint64_t> visit_start_;         // per layer: access time its current/last visit began
  std::vector<double> period_;                // per layer: accesses between its visits (EMA)
  double period_all_ = 1;                     // accesses per token (config)
  int cur_layer_ = -1;
  double horizon_ = 0;                        // mean age of evicted keys, accesses (EMA)
  double w_[kFeatures] = {1, 0, 0, 0, 0, 0, -2, 0, 0};
  std::deque<Sample> samples_;
  uint64_t samples_base_ = 0;                 // index of samples_.front()
  std::vector<int64_t> pending_;              // per key: its live sample's index, or -1

  // Resident index: per layer the resident keys in eviction order by
  // (rank_, last_); pos_[key] = its index there, -1 if not resident.
  bool RankedBefore(uint32_t a, uint32_t b) const {
    return rank_[a] < rank_[b] || (rank_[a] == rank_[b] && last_[a] < last_[b]);
  }
  void Rerank(uint32_t key);          // a resident key's rank is the heat score now
  void RerankLayer(uint32_t layer);   // every resident key of the layer
  void Erase(uint32_t key);
  // A tournament over the layers' first offerable keys (unpinned, not
  // Expected): the winner is EvictFirst's first offer, O(1); a layer's leaf
  // is replayed (O(log layers)) whenever its list or a head's state changes.
  void UpdateHead(uint32_t layer);
  bool HeadBefore(uint32_t a, uint32_t b) const {  // layers, by their heads; no head = last
    const uint32_t ka = head_[a], kb = head_[b];
    if (ka == kNoHead || kb == kNoHead) return kb == kNoHead && ka != kNoHead;
    return RankedBefore(ka, kb);
  }
  static constexpr uint32_t kNoHead = ~0u;
  std::vector<uint32_t> head_;                // per layer: its first offerable key, or kNoHead
  std::vector<uint32_t> tree_;                // tournament: tree_[1] = winning layer; leaves at leaves_ + layer
  uint32_t leaves_ = 1;
  std::vector<std::vector<uint32_t>> members_;
  std::vector<int32_t> pos_;
  std::vector<double> rank_;
  std::vector<uint64_t> ranked_at_;           // per layer: clock of its last RerankLayer
  uint32_t stale_cursor_ = 0;                 // round robin over layers for the once-per-token re-rank
  size_t num_resident_ = 0;
  struct Head {
    double score;
    uint64_t last;
    uint32_t layer, idx;
  };
  std::vector<Head> heads_;                   // EvictFirst's merge heap (reused)
  std::vector<uint32_t> scan_;                // learned EvictFirst's candidates (reused)
};

template <class Take>
int64_t HeatPolicy::EvictFirst(Take&& take) {
  auto offer = [&](uint32_t key, double score) -> int {  // 1 taken, 0 next, -1 stop
    const Offer o = take(key, score);
    if (o == Offer::kTaken) {
      Evicted(key);
      return 1;
    }
    return o == Offer::kStop ? -1 : 0;
  };
  if (cfg_.learned) {  // continuous scores: all residents, coldest first
    scan_.clear();
    for (const auto& m : members_)
      for (uint32_t k : m)
        if (!pinned_[k]) scan_.push_back(k);
    auto hotter = [this](uint32_t a, uint32_t b) { return EvictBefore(b, a); };
    std::make_heap(scan_.begin(), scan_.end(), hotter);
    while (!scan_.empty()) {
      std::pop_heap(scan_.begin(), scan_.end(), hotter);
      const uint32_t k = scan_.back();
      scan_.pop_back();
      const int r = offer(k, Score(k));
      if (r != 0) return r > 0 ? int64_t(k) : -1;
    }
    return -1;
  }
  // Heat: the tournament's winner first (almost always taken); if it is
  // busy, merge the layers' lists: pass 0 offers unhinted keys, pass 1 the
  // keys a look-ahead keeps (Expected), each in rank order.
  uint32_t first = kNoHead;
  if (num_layers_ > 0 && head_[tree_[1]] != kNoHead) {
    first = head_[tree_[1]];
    const int r = offer(first, Score(first));
    if (r != 0) return r > 0 ? int64_t(first) : -1;
  }
  auto hotter = [](const Head& a, const Head& b) {
    return a.score > b.score || (a.score == b.score && a.last > b.last);
  };
  for (int pass = 0; pass < 2; ++pass) {
    auto next = [&](uint32_t layer, uint32_t i) {  // first eligible index >= i (the winner already offered)
      const auto& m = members_[layer];
      while (i < m.size() && (pinned_[m[i]] || Expected(m[i]) != (pass == 1) || m[i] == first)) ++i;
      return i;
    };
    heads_.clear();
    for (uint32_t l = 0; l < num_layers_; ++l) {
      const uint32_t i = next(l, 0);
      if (i < members_[l].size()) heads_.push_back({rank_[members_[l][i]], last_[members_[l][i]], l, i});
    }
    std::make_heap(heads_.begin(), heads_.end(), hotter);
    while (!heads_.empty()) {
      std::pop_heap(heads_.begin(), heads_.end(), hotter);
      const Head h = heads_.back();
      heads_.pop_back();
      const uint32_t k = members_[h.layer][h.idx];
      const int r = offer(k, Score(k));
      if (r != 0) return r > 0 ? int64_t(k) : -1;
      const uint32_t i = next(h.layer, h.idx + 1);
      if (i < members_[h.layer].size()) {
        heads_.push_back({rank_[members_[h.layer][i]], last_[members_[h.layer][i]], h.layer, i});
        std::push_heap(heads_.begin(), heads_.end(), hotter);
      }
    }
  }
  return -1;
}

}  // namespace moe::expertstore
