// moe bench spec [engine flags: --model DIR, --expertd SOCK, ...] [--prompt TEXT | --chat JSON | --ids ...]
//                [--tokens 48] [--modes off,ngram,mtp,auto] [--k 1,2,3,4] [--streams 1,8] [--repeats 3]
//                [--acceptance 0.9,0.8,0.7,0.6 [--budgets 10,50,100]] [--json]
//
// Speculative decoding, paired A/B in one run (docs/SERVING.md "Speculative decoding"):
//  * real drafters (default): every mode x depth K decodes --tokens greedy
//    tokens after the prompt, one stream through Engine::Generate (what
//    `moe run` does) and S streams through the batcher inferd serves with
//    (EngineModel + Batcher, no gRPC; the S streams share the prompt, prefix
//    reuse off). Decode tok/s (prefill excluded: from each stream's first
//    token), tokens per decode step, acceptance per draft position, and
//    routed-expert bytes read per produced token. Every configuration's
//    tokens must equal `off`'s (the bench fails otherwise).
//  * planted acceptance (--acceptance a0,a1,...): for a model whose MTP
//    head has no meaning (random weights, e.g. the GLM-5-shaped slices), the
//    drafts are the `off` run's own continuation, draft i kept with the
//    conditional probability a_i (seeded), else a wrong token - acceptance as
//    measured on the demo model, while the verify's rows, their routing and
//    their extra expert reads are real (one Model::ForwardBatch over the
//    pending token + K drafts, the cache truncated to what was accepted).
//    Configurations: off, K = each --k, and auto (the batcher's DepthChooser
//    fed with the measured step costs and acceptance). With --expertd and
//    --budgets, each budget (percent of the routed-expert bytes) is set on
//    the running expertd (admin SetBudget) before its configurations.
// Planted runs start each budget with one untimed `off` run (the cache's
// refill after SetBudget). Repeats alternate the configuration order (forward, then reversed); the
// median and the spread (min..max) of tok/s are reported, and each
// configuration's ratio to `off` of the same repeat.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/base/flags.h"
#include "common/base/status.h"
#include "common/model/engine.h"
#include "common/sampling/spec.h"
#include "nlohmann/json.hpp"
#include "services/expertd_client/client.h"
#include "services/expertd_client/remote_expert_source.h"
#include "services/inferd/batcher.h"
#include "services/inferd/engine_model.h"
#include "tools/moe/bench_util.h"
#include "tools/moe/commands.h"
#include "tools/moe/model_flags.h"

namespace moe::cli {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Config {
  SpecMode mode = SpecMode::kOff;
  int k = 0;  // draft depth (auto: the most)
  std::string Name() const {
    return mode == SpecMode::kOff ? std::string("off") : absl::StrCat(std::string(SpecModeName(mode)), " K=", k);
  }
};

struct Result {
  double tps = 0;          // decode tokens / s
  double tokens_per_step = 0;
  double bytes_per_token = 0;
  SpecStats spec;
  std::vector<int32_t> tokens;
};

absl::StatusOr<std::vector<int>> IntList(const std::string& flag, const std::string& s, int lo, int hi) {
  std::vector<int> v;
  for (absl::string_view p : absl::StrSplit(s, ',', absl::SkipEmpty())) {
    int x = 0;
    if (!absl::SimpleAtoi(p, &x) || x < lo || x > hi) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": bad value '", p, "' (", lo, "..", hi, ")"));
    }
    v.push_back(x);
  }
  if (v.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty"));
  return v;
}

// One stream through Engine::Generate.
absl::StatusOr<Result> OneStream(Engine& e, const std::vector<int32_t>& prompt, int64_t n, const Config& c) {
  KvCache cache = e.NewCache();
  SamplingParams sp;
  MOE_ASSIGN_OR_RETURN(GenerateResult g, e.Generate(prompt, n, sp, cache, SpecOptions{c.mode, std::max(1, c.k)}));
  Result r;
  r.tokens = g.tokens;
  r.spec = g.spec;
  const int64_t decoded = static_cast<int64_t>(g.tokens.size()) - 1;  // the first comes from the prefill
  r.tps = g.decode_seconds > 0 ? decoded / g.decode_seconds : 0;
  r.tokens_per_step = g.spec.TokensPerStep();
  r.bytes_per_token = decoded > 0 ? static_cast<double>(g.decode_expert_bytes) / decoded : 0;
  return r;
}

// S streams of the same prompt through the batcher.
absl::StatusOr<Result> Streams(const std::string& model, const EngineConfig& ec, const std::vector<int32_t>& prompt,
                               int64_t n, int S, const Config& c) {
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<inferd::EngineModel> m, inferd::EngineModel::Open(model, ec, 0));
  if (c.mode == SpecMode::kMtp || c.mode == SpecMode::kAuto) {
    absl::Status st = m->set_mtp_drafts(true);
    if (!st.ok() && c.mode == SpecMode::kMtp) return st;
  }
  inferd::BatcherConfig bc;
  bc.prefix_cache_bytes = 0;
  bc.spec = SpecOptions{c.mode, std::max(1, c.k)};
  inferd::Batcher b(m.get(), bc);
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  std::vector<Clock::time_point> first(S);
  std::vector<std::vector<int32_t>> toks(S);
  Clock::time_point last_end;
  absl::Status err;
  for (int i = 0; i < S; ++i) {
    inferd::SeqRequest r;
    r.id = absl::StrCat("s", i);
    r.prompt = prompt;
    r.max_tokens = static_cast<int32_t>(n);
    r.sampling.temperature = 0;
    MOE_RETURN_IF_ERROR(b.Submit(std::move(r), [&, i](inferd::SeqOutput o) {
      std::lock_guard<std::mutex> l(mu);
      if (toks[i].empty() && !o.tokens.empty()) first[i] = Clock::now();
      for (const auto& t : o.tokens) toks[i].push_back(t.token);
      if (o.finished) {
        if (o.reason == inferd::EndReason::kError && err.ok()) err = o.error;
        ++done;
        last_end = Clock::now();
        cv.notify_all();
      }
    }));
  }
  const int64_t b0 = m->engine().expert_source().Stats().bytes_read;
  {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return done == S; });
  }
  MOE_RETURN_IF_ERROR(err);
  for (int i = 1; i < S; ++i) {
    if (toks[i] != toks[0]) return absl::InternalError("streams of one prompt disagree (batch invariance broken)");
  }
  const Clock::time_point start = *std::max_element(first.begin(), first.end());
  const double secs = std::chrono::duration<double>(last_end - start).count();
  int64_t decoded = 0;
  for (const auto& t : toks) decoded += static_cast<int64_t>(t.size()) - 1;
  Result r;
  r.tokens = toks[0];
  r.spec = b.stats().spec;
  r.tps = secs > 0 ? decoded / secs : 0;
  r.tokens_per_step = r.spec.TokensPerStep();
  r.bytes_per_token =
      decoded > 0 ? static_cast<double>(m->engine().expert_source().Stats().bytes_read - b0) / decoded : 0;
  return r;
}

// Planted acceptance: drafts from `ref` (the off run's tokens), kept with a_i.
absl::StatusOr<Result> Planted(Engine& e, const std::vector<int32_t>& prompt, const std::vector<int32_t>& ref,
                               int64_t n, const Config& c, const std::vector<double>& acc, uint64_t seed) {
  const Model& m = e.model();
  const int64_t V = m.config().vocab_size;
  KvCache cache = e.NewCache();
  MOE_ASSIGN_OR_RETURN(ForwardResult f, m.Forward(prompt, cache, false));
  if (Argmax(f.logits.data(), V) != ref[0]) return absl::InternalError("planted: the prefill's token is not off's");
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  DepthChooser chooser;
  DraftGuard guard;  // as the batcher's auto: realized seconds per token, drafted vs plain
  Result r;
  r.tokens.push_back(ref[0]);
  const int64_t b0 = e.expert_source().Stats().bytes_read;
  const Clock::time_point t0 = Clock::now();
  int64_t pos = 0;  // ref[pos] is the pending token (sampled, not fed)
  while (static_cast<int64_t>(r.tokens.size()) < n) {
    const int room = static_cast<int>(std::min<int64_t>(c.k, n - static_cast<int64_t>(r.tokens.size()) - 1));
    int k = c.mode == SpecMode::kOff    ? 0
            : c.mode == SpecMode::kAuto ? (guard.Allow(1, DraftSource::kMtp) ? chooser.Choose(room, 1, 0) : 0)
                                        : room;
    k = std::max(0, std::min(k, room));
    std::vector<int32_t> rows = {ref[pos]};
    bool keep = true;
    for (int i = 0; i < k; ++i) {
      const int32_t right = ref[pos + 1 + i];
      keep = keep && u(rng) < acc[std::min<size_t>(i, acc.size() - 1)];
      rows.push_back(keep ? right : static_cast<int32_t>((right + 1) % V));
    }
    const int64_t P0 = cache.length();
    const Clock::time_point s0 = Clock::now();
    BatchSeq one{rows, &cache, k > 0, true};
    MOE_ASSIGN_OR_RETURN(std::vector<ForwardResult> out, m.ForwardBatch(std::span<const BatchSeq>(&one, 1)));
    int accepted = 0;
    const float* lg = out[0].logits.data();
    for (int j = 0; j <= k; ++j) {
      const int32_t t = Argmax(lg + static_cast<int64_t>(j) * V, V);
      if (t != ref[pos + 1 + j]) return absl::InternalError("planted: a verify row's token is not off's");
      r.tokens.push_back(t);
      if (j == k || rows[j + 1] != t) break;
      ++accepted;
    }
    cache.Truncate(P0 + 1 + accepted);
    const double secs = Since(s0);
    chooser.ObserveStep(1, 1 + k, secs);
    if (k > 0) chooser.ObserveAcceptance(k, accepted);
    guard.Observe(1, k > 0 ? DraftSource::kMtp : DraftSource::kNone, 1 + accepted, secs);
    r.spec.Record(k, accepted, 1 + accepted);
    pos += 1 + accepted;
  }
  r.tokens.resize(n);
  const double secs = Since(t0);
  const int64_t decoded = n - 1;
  r.tps = decoded / secs;
  r.tokens_per_step = r.spec.TokensPerStep();
  r.bytes_per_token = static_cast<double>(e.expert_source().Stats().bytes_read - b0) / decoded;
  return r;
}

}  // namespace

int RunBenchSpec(int argc, char** argv) {
  EngineFlags engine;
  PromptFlags prompt_flags;
  int64_t tokens = 48, repeats = 3;
  std::string modes_s = "off,ngram,mtp,auto", ks_s = "1,2,3,4", streams_s = "1,8", acc_s, budgets_s;
  bool json = false;
  FlagSet flags("moe bench spec", "speculative decoding: off vs mtp vs ngram vs auto, K = 1..4, paired in one run");
  engine.Register(flags, "model directory (default: the embedded demo model)");
  AddPromptFlags(flags, "ids", &prompt_flags);
  flags.AddInt("tokens", &tokens, "greedy tokens per configuration");
  flags.AddString("modes", &modes_s, "speculation modes (off is always run: the reference)");
  flags.AddString("k", &ks_s, "draft depths K");
  flags.AddString("streams", &streams_s, "concurrent streams (1: Engine::Generate; more: the batcher)");
  flags.AddInt("repeats", &repeats, "repeats (alternating order)");
  flags.AddString("acceptance", &acc_s,
                  "planted acceptance per draft position (conditional), e.g. the demo model's measured rates");
  flags.AddString("budgets", &budgets_s, "with --expertd and --acceptance: expert budgets in percent, set on expertd");
  flags.AddBool("json", &json, "print JSON");
  prompt_flags.flags = &flags;
  if (auto st = flags.Parse(argc, argv); !st.ok()) return Fail("bench spec", st);
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  auto run = [&]() -> absl::Status {
    if (engine.model.empty()) engine.model = DefaultModelDir();
    if (tokens < 2 || repeats < 1) return absl::InvalidArgumentError("--tokens >= 2, --repeats >= 1");
    MOE_ASSIGN_OR_RETURN(std::vector<int> ks, IntList("k", ks_s, 1, kMaxDraftTokens));
    MOE_ASSIGN_OR_RETURN(std::vector<int> streams, IntList("streams", streams_s, 1, 64));
    std::vector<SpecMode> modes;
    for (absl::string_view p : absl::StrSplit(modes_s, ',', absl::SkipEmpty())) {
      MOE_ASSIGN_OR_RETURN(SpecMode md, ParseSpecMode(std::string_view(p.data(), p.size())));
      if (md != SpecMode::kOff) modes.push_back(md);
    }
    std::vector<double> acc;
    for (absl::string_view p : absl::StrSplit(acc_s, ',', absl::SkipEmpty())) {
      double a = 0;
      if (!absl::SimpleAtod(p, &a) || a < 0 || a > 1) {
        return absl::InvalidArgumentError(absl::StrCat("--acceptance: bad rate '", p, "' (0..1)"));
      }
      acc.push_back(a);
    }
    const bool planted = !acc.empty();
    std::vector<int> budgets = {0};  // 0: as configured
    if (!budgets_s.empty()) {
      if (!planted || engine.expertd.empty()) {
        return absl::InvalidArgumentError("--budgets needs --acceptance and --expertd");
      }
      MOE_ASSIGN_OR_RETURN(budgets, IntList("budgets", budgets_s, 1, 100));
    }
    if (planted) streams = {1};
    MOE_ASSIGN_OR_RETURN(Prompt p, ResolvePrompt(prompt_flags, "ids", engine.model, /*allow_empty=*/false));
    const int64_t ctx = static_cast<int64_t>(p.ids.size()) + tokens + kMaxDraftTokens + 2;
    MOE_ASSIGN_OR_RETURN(EngineConfig ec, PlanAndCheck(engine, ctx, EngineConfig{}, expertd::RemoteSourceFactory));
    MOE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> e, Engine::Open(engine.model, ec));
    std::unique_ptr<expertd::ExpertdClient> admin;
    if (!engine.expertd.empty()) {
      MOE_ASSIGN_OR_RETURN(admin, expertd::ExpertdClient::ConnectAdmin(engine.expertd));
    }
    auto plan = Engine::Plan(engine.model, ec);
    const int64_t expert_total = plan.ok() ? plan->expert_total_bytes : 0;
    std::vector<Config> configs = {{SpecMode::kOff, 0}};
    if (planted) {
      for (int k : ks) configs.push_back({SpecMode::kMtp, k});  // "planted K": named below
      configs.push_back({SpecMode::kAuto, *std::max_element(ks.begin(), ks.end())});
    } else {
      for (SpecMode md : modes) {
        if (md == SpecMode::kAuto) {
          configs.push_back({md, *std::max_element(ks.begin(), ks.end())});
        } else {
          for (int k : ks) configs.push_back({md, k});
        }
      }
    }
    auto name = [&](const Config& c) {
      if (!planted || c.mode == SpecMode::kOff) return c.Name();
      return c.mode == SpecMode::kAuto ? absl::StrCat("auto K<=", c.k) : absl::StrCat("planted K=", c.k);
    };
    // The reference continuation (off), with room for the deepest drafts.
    std::vector<int32_t> ref;
    if (planted) {
      KvCache cache = e->NewCache();
      MOE_ASSIGN_OR_RETURN(GenerateResult g, e->Generate(p.ids, tokens + kMaxDraftTokens + 1, SamplingParams{}, cache));
      ref = g.tokens;
      if (static_cast<int64_t>(ref.size()) < tokens + kMaxDraftTokens + 1) {
        return absl::InvalidArgumentError("planted: the reference stopped early (EOS); give another prompt");
      }
    }
    nlohmann::json out = nlohmann::json::array();
    for (int budget : budgets) {
      if (budget > 0) {
        MOE_ASSIGN_OR_RETURN(uint64_t set, admin->SetBudget(static_cast<uint64_t>(expert_total) * budget / 100));
        (void)set;
      }
      for (int S : streams) {
        // Warm-up (untimed): the first configuration after a budget change would otherwise pay the refill.
        if (planted) {
          absl::StatusOr<Result> w = Planted(*e, p.ids, ref, tokens, configs[0], acc, 999);
          if (!w.ok()) return Annotate(w.status(), "warm-up");
        }
        std::vector<std::vector<Result>> res(configs.size());
        for (int rep = 0; rep < repeats; ++rep) {
          for (size_t j = 0; j < configs.size(); ++j) {
            const size_t ci = rep % 2 == 0 ? j : configs.size() - 1 - j;
            const Config& c = configs[ci];
            absl::StatusOr<Result> r = planted  ? Planted(*e, p.ids, ref, tokens, c, acc, 1000 + rep)
                                       : S == 1 ? OneStream(*e, p.ids, tokens, c)
                                                : Streams(engine.model, ec, p.ids, tokens, S, c);
            if (!r.ok()) return Annotate(r.status(), name(c));
            res[ci].push_back(std::move(*r));
          }
        }
        // Invariance: every configuration's tokens are off's.
        for (size_t ci = 1; ci < configs.size(); ++ci) {
          for (const Result& r : res[ci]) {
            if (r.tokens != res[0][0].tokens) {
              return absl::InternalError(absl::StrCat(name(configs[ci]), ": tokens differ from off's"));
            }
          }
        }
        if (!json) {
          std::printf("%s%s streams %d, %lld tokens, %lld repeats\n", budget > 0 ? absl::StrCat("budget ", budget, "%, ").c_str() : "",
                      planted ? "planted acceptance," : "", S, static_cast<long long>(tokens),
                      static_cast<long long>(repeats));
          std::printf("  %-14s %9s %15s %9s %11s %10s  %s\n", "config", "tok/s", "(min..max)", "x off", "tok/step",
                      "MB/token", "acceptance per position");
        }
        for (size_t ci = 0; ci < configs.size(); ++ci) {
          std::vector<double> tps, ratio;
          SpecStats all;
          double tps_step = 0, bpt = 0;
          for (size_t rep = 0; rep < res[ci].size(); ++rep) {
            tps.push_back(res[ci][rep].tps);
            ratio.push_back(res[0][rep].tps > 0 ? res[ci][rep].tps / res[0][rep].tps : 0);
            all.Add(res[ci][rep].spec);
            tps_step += res[ci][rep].tokens_per_step / res[ci].size();
            bpt += res[ci][rep].bytes_per_token / res[ci].size();
          }
          std::vector<double> acc_at;
          for (size_t i = 0; i < all.drafted_at.size(); ++i) {
            acc_at.push_back(all.drafted_at[i] ? static_cast<double>(all.accepted_at[i]) / all.drafted_at[i] : 0);
          }
          const Spread sp = SpreadOf(tps);
          nlohmann::json row = {{"budget_pct", budget},
                                {"streams", S},
                                {"config", name(configs[ci])},
                                {"tps_median", sp.median},
                                {"tps_min", sp.min},
                                {"tps_max", sp.max},
                                {"ratio_to_off_median", SpreadOf(ratio).median},
                                {"tokens_per_step", tps_step},
                                {"expert_bytes_per_token", bpt},
                                {"acceptance_per_position", acc_at}};
          out.push_back(row);
          if (!json) {
            std::string a;
            for (double x : acc_at) absl::StrAppend(&a, absl::StrFormat("%.2f ", x));
            std::printf("  %-14s %9.2f %7.2f..%-7.2f %9.3f %11.2f %10.2f  %s\n", name(configs[ci]).c_str(), sp.median,
                        sp.min, sp.max, SpreadOf(ratio).median, tps_step, bpt / 1e6, a.c_str());
          }
        }
      }
    }
    if (json) std::printf("%s\n", out.dump(1).c_str());
    return absl::OkStatus();
  };
  if (absl::Status st = run(); !st.ok()) return Fail("bench spec", st);
  return 0;
}

}  // namespace moe::cli
