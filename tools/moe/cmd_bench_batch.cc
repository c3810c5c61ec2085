// moe bench batch --model DIR [--seqs 1,4,16,32] [--context 128] [--steps 8] [--repeats 5] [--json]
//
// Continuous batching in the engine: one decode step for S sequences (each
// at its own position, its own KV cache) as ONE Model::ForwardBatch versus S
// separate forwards (what a worker without a fused batch does). Per S:
// median step time of both (spread over repeats, alternated in the same
// run), tokens/s, the speed-up, routed-expert fetches per step, and the
// fused step time relative to the S = 1 step (1.0 = batching is free).
// Every step's tokens must agree between the two ways (batch invariance);
// the bench fails otherwise. Experts are fetched from an in-process store
// with the whole model resident (warm), so the figure is compute + memory
// traffic, not disk.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "common/base/flags.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/base/status.h"
#include "common/model/engine.h"
#include "nlohmann/json.hpp"
#include "tools/moe/commands.h"

namespace moe::cli {
namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct StepResult {
  double seconds = 0;
  int64_t fetches = 0;
  std::vector<int32_t> tokens;  // argmax of every sequence after the last step
};

// `steps` decode steps from copies of `start`, fused or not.
absl::StatusOr<StepResult> Decode(Engine& e, const std::vector<KvCache>& start, const std::vector<int32_t>& first,
                                  int steps, bool fused) {
  const Model& m = e.model();
  const int64_t V = m.config().vocab_size;
  std::vector<KvCache> caches = start;
  std::vector<int32_t> next = first;
  const size_t S = caches.size();
  StepResult r;
  const int64_t g0 = e.local_source().Stats().gets;
  const auto t0 = Clock::now();
  for (int st = 0; st < steps; ++st) {
    std::vector<std::vector<int32_t>> ids(S);
    std::vector<BatchSeq> batch(S);
    for (size_t i = 0; i < S; ++i) {
      ids[i] = {next[i]};
      batch[i] = BatchSeq{ids[i], &caches[i], false, true};
    }
    std::vector<ForwardResult> out;
    if (fused) {
      MOE_ASSIGN_OR_RETURN(out, m.ForwardBatch(batch));
    } else {
      for (size_t i = 0; i < S; ++i) {
        MOE_ASSIGN_OR_RETURN(std::vector<ForwardResult> one, m.ForwardBatch(std::span(&batch[i], 1)));
        out.push_back(std::move(one[0]));
      }
    }
    for (size_t i = 0; i < S; ++i) next[i] = Argmax(out[i].logits.data(), V);
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count() / steps;
  r.fetches = (e.local_source().Stats().gets - g0) / steps;
  r.tokens = next;
  return r;
}

}  // namespace

int RunBenchBatch(int argc, char** argv) {
  std::string model;
  std::string seqs_s = "1,4,16,32";
  int64_t context = 128, steps = 8, repeats = 5;
  bool json = false;
  FlagSet flags("moe bench batch", "fused batched decode step (one forward for S sequences) vs S forwards");
  flags.AddString("model", &model, "model directory (checkpoint or converted container)");
  flags.AddString("seqs", &seqs_s, "comma-separated batch sizes S");
  flags.AddInt("context", &context, "prompt tokens per sequence before the timed decode steps");
  flags.AddInt("steps", &steps, "decode steps per timing");
  flags.AddInt("repeats", &repeats, "timings per S and way (alternated)");
  flags.AddBool("json", &json, "print JSON");
  if (auto st = flags.Parse(argc, argv); !st.ok()) return Fail("bench batch", st);
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (model.empty()) return Fail("bench batch", absl::InvalidArgumentError("--model is required"));
  std::vector<int> seqs;
  for (absl::string_view p : absl::StrSplit(seqs_s, ',')) {
    int v = 0;
    if (!absl::SimpleAtoi(p, &v) || v < 1 || v > 256) {
      return Fail("bench batch", absl::InvalidArgumentError(absl::StrCat("--seqs: bad batch size '", p, "'")));
    }
    seqs.push_back(v);
  }
  std::sort(seqs.begin(), seqs.end());  // S = 1 (when asked) first: the reference step
  if (context < 1 || steps < 1 || repeats < 1) {
    return Fail("bench batch", absl::InvalidArgumentError("--context, --steps, --repeats must be >= 1"));
  }
  auto eng = Engine::Open(model, EngineConfig{});
  if (!eng.ok()) return Fail("bench batch", eng.status());
  Engine& e = **eng;
  const int64_t V = e.config().vocab_size;
  if (context + steps * (repeats + 1) >= e.config().max_position_embeddings) {
    return Fail("bench batch", absl::InvalidArgumentError(absl::StrCat(
                                   "--context + steps exceed the model's context ", e.config().max_position_embeddings)));
  }
  std::mt19937 rng(1);
  nlohmann::json rows = nlohmann::json::array();
  double step1 = 0;
  if (!json) {
    std::printf("%4s %12s %12s %9s %12s %12s %10s %10s\n", "S", "fused ms", "separate ms", "speedup", "fused tok/s",
                "sep tok/s", "fetch f/s", "fused/S=1");
  }
  for (int S : seqs) {
    std::vector<KvCache> start;
    std::vector<int32_t> first(S);
    for (int i = 0; i < S; ++i) {
      start.push_back(e.NewCache());
      std::vector<int32_t> prompt(context);
      for (auto& t : prompt) t = static_cast<int32_t>(rng() % V);
      auto r = e.model().Forward(prompt, start.back(), false);
      if (!r.ok()) return Fail("bench batch", r.status());
      first[i] = Argmax(r->logits.data(), V);
    }
    // Warm-up (touches every routed expert the steps use).
    for (bool fused : {true, false}) {
      auto w = Decode(e, start, first, static_cast<int>(steps), fused);
      if (!w.ok()) return Fail("bench batch", w.status());
    }
    std::vector<double> tf, ts;
    int64_t ff = 0, fs = 0;
    for (int64_t rep = 0; rep < repeats; ++rep) {
      auto a = Decode(e, start, first, static_cast<int>(steps), true);
      auto b = Decode(e, start, first, static_cast<int>(steps), false);
      if (!a.ok()) return Fail("bench batch", a.status());
      if (!b.ok()) return Fail("bench batch", b.status());
      if (a->tokens != b->tokens) {
        return Fail("bench batch", absl::InternalError(absl::StrCat(
                                       "S=", S, ": fused and separate forwards disagree (batch invariance broken)")));
      }
      tf.push_back(a->seconds);
      ts.push_back(b->seconds);
      ff = a->fetches;
      fs = b->fetches;
    }
    const double mf = Median(tf), ms = Median(ts);
    if (S == 1) step1 = mf;
    nlohmann::json row = {{"S", S},
                          {"fused_step_ms", mf * 1e3},
                          {"fused_step_ms_min", *std::min_element(tf.begin(), tf.end()) * 1e3},
                          {"fused_step_ms_max", *std::max_element(tf.begin(), tf.end()) * 1e3},
                          {"separate_step_ms", ms * 1e3},
                          {"separate_step_ms_min", *std::min_element(ts.begin(), ts.end()) * 1e3},
                          {"separate_step_ms_max", *std::max_element(ts.begin(), ts.end()) * 1e3},
                          {"speedup", ms / mf},
                          {"fused_tokens_per_s", S / mf},
                          {"separate_tokens_per_s", S / ms},
                          {"expert_fetches_per_step_fused", ff},
                          {"expert_fetches_per_step_separate", fs},
                          {"fused_step_over_single_step", step1 > 0 ? mf / step1 : 0.0}};
    rows.push_back(row);
    if (!json) {
      std::printf("%4d %12.2f %12.2f %8.2fx %12.1f %12.1f %4lld/%-5lld %10.2f\n", S, mf * 1e3, ms * 1e3, ms / mf,
                  S / mf, S / ms, static_cast<long long>(ff), static_cast<long long>(fs),
                  step1 > 0 ? mf / step1 : 0.0);
    }
  }
  if (json) {
    nlohmann::json out = {{"model", model}, {"context", context}, {"steps", steps}, {"repeats", repeats},
                          {"rows", rows}};
    std::printf("%s\n", out.dump(1).c_str());
  }
  return 0;
}

}  // namespace moe::cli
