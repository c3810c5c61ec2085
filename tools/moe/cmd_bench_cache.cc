// moe bench cache --trace FILE | --synthetic  --budget BYTES [--expert-bytes 19M] [--json]
// Replays a routing trace (moe run --record-routing, or a synthetic skewed
// trace with GLM-5 shapes) through plain LRU, expertd's policy and Belady's
// offline optimum with the same number of slots (budget / expert bytes);
// reports hit rates and the share of the LRU-to-Belady gap our policy closes.
// --decision-cost: instead, times the policy's eviction decisions as the
// replay makes them at 2, 5 and 10% of the trace's experts (--repeats N
// replays each; median [min..max] ns per decision).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/flags.h"
#include "common/expertstore/cache_sim.h"
#include "nlohmann/json.hpp"
#include "tools/moe/commands.h"

namespace moe::cli {
namespace {

// --decision-cost: the heat order's eviction decisions timed as the replay
// makes them (HeatPolicy::EvictFirst, the victim dropped from the policy's
// index; timer overhead taken off), at 2, 5 and 10% of the keys, `repeats`
// replays each; also the policy's per-access work and, on the final state,
// one decision vs the scan it replaced (one Score per resident).
int DecisionCost(const expertstore::RoutingTrace& t, uint64_t keys, const expertstore::PolicyConfig& pc,
                 expertstore::ReplayOptions ro, int repeats, bool json) {
  using namespace expertstore;
  ro.time_policy = true;
  struct Spread {
    double median, min, max;
  };
  auto spread = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return Spread{n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, v.front(), v.back()};
  };
  nlohmann::json rows = nlohmann::json::array();
  if (!json)
    std::printf("eviction decisions of the heat order, %u layers x %u experts = %llu keys, %u tokens, %d replays "
                "each:\n",
                t.num_layers, t.num_experts, (unsigned long long)keys, t.num_tokens, repeats);
  for (double frac : {0.02, 0.05, 0.10}) {
    const uint64_t slots = std::max<uint64_t>(1, uint64_t(std::llround(frac * double(keys))));
    std::vector<double> evict, touch, final_dec, final_scan;
    uint64_t decisions = 0;
    double timer = 0, hit_rate = 0;
    for (int rep = 0; rep < repeats; ++rep) {
      const SimResult x = SimulateHeat(t, slots, pc, ro);
      evict.push_back(x.evict_ns);
      touch.push_back(x.touch_ns);
      final_dec.push_back(x.decision_ns);
      final_scan.push_back(x.scan_ns);
      decisions = x.decisions;
      timer = x.timer_ns;
      hit_rate = x.hit_rate();
    }
    const Spread e = spread(evict), a = spread(touch), d = spread(final_dec), sc = spread(final_scan);
    auto js = [](const Spread& s) { return nlohmann::json{{"median", s.median}, {"min", s.min}, {"max", s.max}}; };
    rows.push_back({{"budget_fraction", frac},
                    {"slots", slots},
                    {"decisions_per_replay", decisions},
                    {"hit_rate", hit_rate},
                    {"decision_ns", js(e)},
                    {"touch_ns", js(a)},
                    {"final_state_decision_ns", js(d)},
                    {"final_state_scan_ns", js(sc)},
                    {"timer_ns", timer}});
    if (!json)
      std::printf("  %4.0f%% (%llu slots): %.0f ns per decision [%.0f..%.0f] over %llu decisions a replay; "
                  "per access %.0f ns [%.0f..%.0f]; final state: decision %.0f ns, one Score per resident %.0f ns "
                  "(timer %.0f ns taken off)\n",
                  100 * frac, (unsigned long long)slots, e.median, e.min, e.max, (unsigned long long)decisions,
                  a.median, a.min, a.max, d.median, sc.median, timer);
  }
  if (json)
    std::printf("%s\n", nlohmann::json{{"layers", t.num_layers},
                                       {"experts", t.num_experts},
                                       {"keys", keys},
                                       {"tokens", t.num_tokens},
                                       {"repeats", repeats},
                                       {"budgets", rows}}
                            .dump(1)
                            .c_str());
  return 0;
}

}  // namespace

int RunBenchCache(int argc, char** argv) {
  using namespace expertstore;
  std::string trace_path, save, warm_path;
  bool synthetic = false, json = false;
  uint64_t budget = 0, expert_bytes = 19ull << 20;
  int64_t tokens = 2000, layers = 75, experts = 256, harvest_every = 0, seed = 1, sample = 64;
  double learn_rate = PolicyConfig{}.learn_rate;
  double zipf = 0.9, keep = 0.35, slow = 64, fast = 0.5, alpha = 40.0, window = PolicyConfig{}.window_tokens;
  bool fixed_alpha = false;
  bool row_leases = false, recorded_lookahead = false, quick = false, decision_cost = false;
  int64_t repeats = 7;
  std::string near_future_s, informed_weights_s = "3";
  double change_z = PolicyConfig{}.change_z, steady = PolicyConfig{}.steady_tokens, lookahead = 0;
  FlagSet flags("cache", "Replay a routing trace: LRU vs our policy vs Belady's optimum.");
  flags.AddString("trace", &trace_path, "routing trace file (moestream-routing-trace 1 or 2)");
  flags.AddBool("synthetic", &synthetic, "generate a skewed GLM-5-shaped trace instead");
  flags.AddString("save-trace", &save, "write the (synthetic) trace here");
  flags.AddBytes("budget", &budget, "cache budget in bytes");
  flags.AddBytes("expert-bytes", &expert_bytes, "bytes per expert (GLM-5 int4: ~19 MiB)");
  flags.AddInt("tokens", &tokens, "synthetic: tokens");
  flags.AddInt("layers", &layers, "synthetic: MoE layers (GLM-5: 75)");
  flags.AddInt("experts", &experts, "synthetic: routed experts per layer (GLM-5: 256)");
  flags.AddInt("seed", &seed, "synthetic: seed");
  flags.AddDouble("zipf", &zipf, "synthetic: Zipf exponent of expert popularity");
  flags.AddDouble("keep", &keep, "synthetic: chance to reuse each of the previous token's experts");
  flags.AddDouble("slow-tokens", &slow, "policy: half-life of the frequency term (tokens)");
  flags.AddDouble("fast-tokens", &fast, "policy: half-life of the recency term (tokens)");
  flags.AddDouble("alpha", &alpha, "policy: weight of the recency term");
  flags.AddDouble("window-tokens", &window, "policy: step recency (alpha while used within this many tokens)");
  flags.AddBool("fixed-alpha", &fixed_alpha, "policy: keep --alpha (default: learn it from the trace)");
  flags.AddDouble("learn-rate", &learn_rate, "policy: learning rate of the learned eviction order");
  flags.AddInt("harvest-every", &harvest_every,
              "policy: deliver hits every N accesses, counted, as expertd harvests workers' shm leases (0: at once)");
  flags.AddInt("sample", &sample,
              "learned order: eviction candidates sampled per miss (0 = exact scan, slow); the heat order and the "
              "references decide exactly, as expertd");
  flags.AddDouble("change-z", &change_z, "policy: adaptive-window frequency, z of the change test (0 = slow count only)");
  flags.AddDouble("steady-tokens", &steady, "policy: half-life of the steady count (tokens)");
  flags.AddDouble("lookahead-accuracy", &lookahead, "policy: simulated router look-ahead hints, share right (0 = none)");
  flags.AddBool("lookahead", &recorded_lookahead,
               "policy: replay the trace's recorded router look-ahead (version 2 traces, moe run --record-routing)");
  flags.AddBool("row-leases", &row_leases,
               "policy: a row's (token x layer's) keys are not victims of its own misses (worker leases hits first)");
  flags.AddString("warm-trace", &warm_path,
                  "policy: also replay with the heat this routing trace leaves (same model), as expertd restarted "
                  "with a heat file saved after serving it");
  flags.AddBool("json", &json, "print JSON");
  flags.AddBool("quick", &quick, "only LRU, ours and Belady (skip learned, static, informed)");
  flags.AddString("informed-weights", &informed_weights_s,
                  "synthetic: the informed bound's rules q + w p to try (the best is reported), e.g. 0,0.5,1,3");
  flags.AddString("near-future", &near_future_s,
                  "reference: our policy told the true routing of the next N rows (token x layer), e.g. 1,8,75");
  flags.AddBool("decision-cost", &decision_cost,
               "time the heat order's eviction decisions at 2, 5 and 10% of the trace's experts instead (GLM-5's "
               "19,456: --synthetic --layers 76); --budget not needed");
  flags.AddInt("repeats", &repeats, "--decision-cost: replays per budget (median and spread over them)");

  if (auto s = flags.Parse(argc, argv); !s.ok()) return Fail("bench cache", s);
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (trace_path.empty() == !synthetic)
    return Fail("bench cache", absl::InvalidArgumentError("give exactly one of --trace FILE or --synthetic"));
  if ((budget == 0 && !decision_cost) || expert_bytes == 0)
    return Fail("bench cache", absl::InvalidArgumentError("--budget and --expert-bytes must be > 0"));
  if (synthetic && (layers < 1 || experts < 1 || experts > 65536 || tokens < 1))
    return Fail("bench cache", absl::InvalidArgumentError(absl::StrCat(
                                   "--layers, --tokens must be >= 1 and --experts in [1, 65536] (got ", layers,
                                   ", ", tokens, ", ", experts, ")")));
  if (synthetic && !(keep >= 0 && keep <= 1 && zipf >= 0))
    return Fail("bench cache", absl::InvalidArgumentError("--keep must be in [0, 1] and --zipf >= 0"));
  if (!(lookahead >= 0 && lookahead <= 1))
    return Fail("bench cache", absl::InvalidArgumentError(absl::StrCat("--lookahead-accuracy must be in [0, 1] (got ",
                                                                       lookahead, ")")));
  if (harvest_every < 0 || !(learn_rate >= 0))
    return Fail("bench cache", absl::InvalidArgumentError("--harvest-every and --learn-rate must be >= 0"));
  if (repeats < 1 || repeats > 1000)
    return Fail("bench cache",
                absl::InvalidArgumentError(absl::StrCat("--repeats must be in [1, 1000] (got ", repeats, ")")));
  RoutingTrace t;
  SyntheticTraceConfig c;
  if (synthetic) {
    c.num_layers = static_cast<uint32_t>(layers);
    c.num_experts = static_cast<uint32_t>(experts);
    c.num_tokens = static_cast<uint32_t>(tokens);
    c.seed = static_cast<uint64_t>(seed);
    c.zipf_s = zipf;
    c.keep_prob = keep;
    t = MakeSyntheticTrace(c);
    if (!save.empty()) {
      if (auto s = SaveTrace(t, save); !s.ok()) return Fail("bench cache", s);
    }
  } else {
    auto r = LoadTrace(trace_path);
    if (!r.ok()) return Fail("bench cache", r.status());
    t = std::move(*r);
  }
  RoutingTrace warm;
  if (!warm_path.empty()) {
    auto r = LoadTrace(warm_path);
    if (!r.ok()) return Fail("bench cache", r.status());
    warm = std::move(*r);
    if (warm.num_layers != t.num_layers || warm.num_experts != t.num_experts || warm.top_k != t.top_k)
      return Fail("bench cache", absl::InvalidArgumentError(absl::StrCat(
                                     "--warm-trace ", warm_path, " is ", warm.num_layers, " layers x ",
                                     warm.num_experts, " experts, top-", warm.top_k, "; the replayed trace is ",
                                     t.num_layers, " x ", t.num_experts, ", top-", t.top_k, " (another model)")));
  }
  if (recorded_lookahead && t.ahead.empty())
    return Fail("bench cache", absl::InvalidArgumentError(
                                   "--lookahead: the trace has no recorded look-ahead (version 1, or synthetic: use "
                                   "--lookahead-accuracy)"));
  if (recorded_lookahead && lookahead > 0)
    return Fail("bench cache", absl::InvalidArgumentError("give at most one of --lookahead and --lookahead-accuracy"));
  // Hints only when asked for: the recorded look-ahead, or simulated ones.
  auto hints = [&](RoutingTrace& x, uint64_t seed) {
    if (!recorded_lookahead) x.ahead.clear();
    if (lookahead > 0) AddLookahead(x, lookahead, seed);
  };
  hints(t, 11);
  if (!warm_path.empty()) hints(warm, 12);
  uint64_t slots = budget / expert_bytes;
  uint64_t keys = uint64_t(t.num_layers) * t.num_experts;
  auto t0 = std::chrono::steady_clock::now();
  const int cands = sample > 0 ? static_cast<int>(sample) : 1 << 30;
  PolicyConfig pc{0, slow, fast, alpha, window, !fixed_alpha};
  pc.learn_rate = learn_rate;
  pc.change_z = change_z;
  pc.steady_tokens = steady;
  pc.learned = false;
  const ReplayOptions ro{.sample = cands, .harvest_every = static_cast<uint64_t>(harvest_every), .row_leases = row_leases};
  if (decision_cost) return DecisionCost(t, keys, pc, ro, int(repeats), json);
  auto lru = SimulateLru(t, slots);
  auto ours = SimulateHeat(t, slots, pc, ro);  // expertd's default order: the heat score
  pc.learned = true;
  SimResult learned;
  if (!quick) learned = SimulateHeat(t, slots, pc, ro);  // expertd --policy learned
  // Warm: the policy restored from the heat the warm trace's replay left.
  SimResult ours_warm, learned_warm;
  if (!warm_path.empty()) {
    for (bool l : {false, true}) {
      pc.learned = l;
      const std::string heat = SimulateHeat(warm, slots, pc, ro).heat;
      ReplayOptions w = ro;
      w.warm_heat = &heat;
      (l ? learned_warm : ours_warm) = SimulateHeat(t, slots, pc, w);
      if (auto st = (l ? learned_warm : ours_warm).status; !st.ok()) return Fail("bench cache", st);
    }
  }
  auto opt = SimulateBelady(t, slots);
  SimResult opt_nb, fixed;
  if (!quick) {
    opt_nb = SimulateBelady(t, slots, false);
    fixed = SimulateStaticBest(t, slots);
  }
  // Synthetic only: the bound of an online policy told the generator's
  // distribution; exact decisions, as ours.
  constexpr int kExact = 1 << 30;
  SimResult informed, phase_counts;
  double informed_weight = 0;
  if (synthetic && !quick) {
    for (absl::string_view w : absl::StrSplit(informed_weights_s, ',', absl::SkipEmpty())) {
      double wv;
      if (!absl::SimpleAtod(w, &wv) || wv < 0)
        return Fail("bench cache", absl::InvalidArgumentError(absl::StrCat("--informed-weights: '", w, "'")));
      SimResult x = SimulateInformed(t, slots, c, 8, kExact, false, wv);
      if (x.hits >= informed.hits) informed = x, informed_weight = wv;
    }
    phase_counts = SimulateInformed(t, slots, c, 1, kExact, /*phase_counts=*/true);
  }
  std::vector<std::pair<int64_t, SimResult>> near_future;
  for (absl::string_view f : absl::StrSplit(near_future_s, ',', absl::SkipEmpty())) {
    int64_t rows;
    if (!absl::SimpleAtoi(f, &rows) || rows < 0)
      return Fail("bench cache", absl::InvalidArgumentError(absl::StrCat("--near-future: '", f, "' is not a row count")));
    pc.learned = false;
    near_future.push_back({rows, SimulateNearFuture(t, slots, uint64_t(rows), pc)});
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double gap = opt.hit_rate() - lru.hit_rate();
  // Share of the LRU -> Belady gap a policy's hit rate closes.
  auto closed_by = [&](const SimResult& x) { return gap > 0 ? (x.hit_rate() - lru.hit_rate()) / gap : 0.0; };
  const double closed = closed_by(ours), closed_learned = closed_by(learned);
  if (json) {
    nlohmann::json j = {{"trace", synthetic ? "synthetic" : trace_path},
                        {"layers", t.num_layers},
                        {"experts", t.num_experts},
                        {"top_k", t.top_k},
                        {"tokens", t.num_tokens},
                        {"accesses", lru.accesses},
                        {"slots", slots},
                        {"budget_fraction", double(slots) / double(keys)},
                        {"hit_rate",
                         {{"lru", lru.hit_rate()},
                          {"ours", ours.hit_rate()},
                          {"learned", learned.hit_rate()},
                          {"belady", opt.hit_rate()}, {"belady_no_bypass", opt_nb.hit_rate()}}},
                        {"gap_closed", closed},
                        {"gap_closed_learned", closed_learned},
                        {"static_best_hit_rate", fixed.hit_rate()},
                        {"gap_closed_static_best", closed_by(fixed)},
                        {"learned_weights", learned.weights},
                        {"gap_closed_informed", synthetic ? closed_by(informed) : 0.0},
                        {"informed_weight", informed_weight},
                        {"gap_closed_phase_counts", synthetic ? closed_by(phase_counts) : 0.0},
                        {"score_ns", {{"ours", ours.score_ns}, {"learned", learned.score_ns}}},
                        {"decision_us", {{"ours", ours.decision_ns / 1e3}, {"learned", learned.decision_ns / 1e3}}},
                        {"scan_us", ours.scan_ns / 1e3},
                        {"decision_candidates", ours.decision_candidates},
                        {"keys", keys},
                        {"seconds", secs}};
    for (const auto& [rows, nf] : near_future)
      j["near_future"].push_back({{"rows", rows}, {"hit_rate", nf.hit_rate()}, {"gap_closed", closed_by(nf)}});
    if (!warm_path.empty()) {
      j["warm_trace"] = warm_path;
      j["hit_rate"]["ours_warm"] = ours_warm.hit_rate();
      j["hit_rate"]["learned_warm"] = learned_warm.hit_rate();
      j["gap_closed_warm"] = closed_by(ours_warm);
      j["gap_closed_learned_warm"] = closed_by(learned_warm);
    }
    std::printf("%s\n", j.dump(1).c_str());
    return 0;
  }
  std::printf("trace: %u layers x %u experts, top-%u, %u tokens, %lu accesses\n", t.num_layers, t.num_experts,
              t.top_k, t.num_tokens, (unsigned long)lru.accesses);
  std::printf("budget: %lu slots of %.1f MiB = %.1f%% of the experts\n", (unsigned long)slots,
              expert_bytes / 1048576.0, 100.0 * slots / keys);
  std::printf("hit rate: LRU %.2f%%  ours (heat) %.2f%%  learned %.2f%%  Belady %.2f%% (without bypass %.2f%%)%s\n",
              100 * lru.hit_rate(), 100 * ours.hit_rate(), 100 * learned.hit_rate(), 100 * opt.hit_rate(),
              100 * opt_nb.hit_rate(), t.ahead.empty() ? "" : "  [policies given look-ahead hints]");
  std::printf("LRU->Belady gap closed by ours: %.0f%% (learned order: %.0f%%)   (%.1f s)\n", 100 * closed,
              100 * closed_learned, secs);
  std::printf("static best in hindsight (the trace's most used keys, fixed): %.2f%%, %.0f%% of the gap\n",
              100 * fixed.hit_rate(), 100 * closed_by(fixed));
  std::printf("eviction order cost: heat %.1f ns, learned %.1f ns per candidate (expertd scores every unpinned "
              "slab per miss: %.0f us at %lu slots)\n",
              ours.score_ns, learned.score_ns, ours.score_ns * double(slots) / 1000, (unsigned long)slots);
  std::printf("one eviction decision (%llu residents of %llu keys): heat %.2f us (one Score per resident: %.1f us), "
              "learned %.1f us\n",
              (unsigned long long)ours.decision_candidates, (unsigned long long)keys, ours.decision_ns / 1e3,
              ours.scan_ns / 1e3, learned.decision_ns / 1e3);
  if (!warm_path.empty())
    std::printf("warm (heat left by %s): ours %.2f%%, %.0f%% of the gap; learned %.2f%%, %.0f%%\n", warm_path.c_str(),
                100 * ours_warm.hit_rate(), 100 * closed_by(ours_warm), 100 * learned_warm.hit_rate(),
                100 * closed_by(learned_warm));
  for (const auto& [rows, nf] : near_future)
    std::printf("near future: told the next %lld rows' routing: %.2f%%, %.0f%% of the gap\n", (long long)rows,
                100 * nf.hit_rate(), 100 * closed_by(nf));
  if (synthetic && !quick) {
    std::printf("informed bound (told each phase's expected popularity and the reuse chance; rule q + %.1f p): %.2f%%, "
                "%.0f%% of the gap\n",
                informed_weight, 100 * informed.hit_rate(), 100 * closed_by(informed));
    std::printf("phase-counts reference (told when phases begin, counts this phase's uses): %.2f%%, %.0f%% of the gap\n",
                100 * phase_counts.hit_rate(), 100 * closed_by(phase_counts));
  }
  return 0;
}

}  // namespace moe::cli
