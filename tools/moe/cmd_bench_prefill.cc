// moe bench prefill [--model DIR] [--expert-share 0.02 | --expert-budget BYTES] [--prompts 128,1024,8192]
//                   [--chunk 128] [--pass-bytes 512M] [--returning 4096] [--new-tokens 32] [--json]
//
// Prompts at GLM-5 scale (docs/SERVING.md, "Planned prefill"), through the
// batcher inferd serves with (EngineModel + Batcher, no gRPC): for each
// prompt length, time to first token and routed-expert bytes read with
// chunked prefill (--chunk tokens per step: the old default) and with
// planned prefill (layer-major passes of --pass-bytes of activations), next
// to the bytes of the distinct experts the prompt routes to (each read once,
// at its own record's size: the floor) - same model, same cold in-process expert cache of the given
// share, same run. The greedy first tokens of both must agree (the bench
// fails otherwise). Then a returning conversation (--returning tokens, then
// --new-tokens more): TTFT cold, from the RAM prefix cache, and from the disk
// tier after a restart (a new model + batcher on the same --prefix-cache-dir,
// which first serves one unrelated request of the new turn's length,
// untimed, so it is warm; the restart's model open time is reported apart).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <random>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/flags.h"
#include "common/base/status.h"
#include "common/model/engine.h"
#include "common/model/pass_memory.h"
#include "nlohmann/json.hpp"
#include "services/inferd/batcher.h"
#include "services/inferd/engine_model.h"
#include "services/inferd/prefix_disk_tier.h"
#include "tools/moe/commands.h"
#include "tools/moe/profile_json.h"

namespace moe::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct Waiter {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Clock::time_point first{};
  inferd::SeqOutput fin;
  std::vector<int32_t> tokens;
  inferd::SeqCallback Cb() {
    return [this](inferd::SeqOutput o) {
      std::lock_guard<std::mutex> l(mu);
      if (first == Clock::time_point{} && !o.tokens.empty()) first = Clock::now();
      for (const auto& t : o.tokens) tokens.push_back(t.token);
      if (o.finished) {
        done = true;
        fin = o;
      }
      cv.notify_all();
    };
  }
  void Wait() {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return done; });
  }
};

struct Served {
  double ttft = 0;
  int64_t bytes = 0, fetches = 0, passes = 0, cached = 0;
  std::vector<int32_t> tokens;
  StepProfile profile;  // where the request's forwards spent their time
  absl::Status status;
};

// One greedy request of `prompt` (max_tokens 1) on `b`, timed from Submit.
Served Once(inferd::Batcher& b, inferd::EngineModel& m, const std::vector<int32_t>& prompt, const std::string& id) {
  Served s;
  const int64_t bytes0 = m.engine().expert_source().Stats().bytes_read;
  const int64_t fetches0 = b.stats().expert_fetches, passes0 = b.stats().prefill_passes;
  inferd::SeqRequest r;
  r.id = id;
  r.prompt = prompt;
  r.max_tokens = 1;
  r.sampling.temperature = 0;
  Waiter w;
  // Only this request runs on b: its forwards are the profile's.
  m.engine().mutable_model().set_profile(&s.profile);
  const Clock::time_point t0 = Clock::now();
  s.status = b.Submit(std::move(r), w.Cb());
  if (s.status.ok()) w.Wait();
  m.engine().mutable_model().set_profile(nullptr);
  if (!s.status.ok()) return s;
  if (w.fin.reason == inferd::EndReason::kError) s.status = w.fin.error;
  s.ttft = std::chrono::duration<double>(w.first - t0).count();
  s.bytes = m.engine().expert_source().Stats().bytes_read - bytes0;
  s.fetches = b.stats().expert_fetches - fetches0;
  s.passes = b.stats().prefill_passes - passes0;
  s.cached = w.fin.cached_prompt_tokens;
  s.tokens = w.tokens;
  return s;
}

}  // namespace

int RunBenchPrefill(int argc, char** argv) {
  std::string model = MOE_DEFAULT_MODEL_DIR, prompts_s = "128,1024,8192", prefix_dir;
  double share = 0.02;
  uint64_t budget = 0, pass_bytes = kDefaultPrefillPassBytes;
  int64_t chunk = 128, returning = 4096, new_tokens = 32, chunked_max = 0;
  bool json = false, cold_case = true;
  FlagSet flags("moe bench prefill",
                "TTFT and expert bytes of chunked vs planned (layer-major) prefill, and a returning conversation "
                "cold / RAM prefix cache / disk tier after a restart");
  flags.AddString("model", &model, "model directory (checkpoint or container; default: the embedded demo model)");
  flags.AddDouble("expert-share", &share, "in-process expert cache as a share of all routed-expert bytes");
  flags.AddBytes("expert-budget", &budget, "expert cache bytes (instead of --expert-share)");
  flags.AddString("prompts", &prompts_s, "prompt lengths, comma-separated (capped at the model's context)");
  flags.AddInt("chunk", &chunk, "chunked prefill's tokens per step (inferd --prefill-chunk)");
  flags.AddInt("chunked-max-tokens", &chunked_max,
               "run the chunked case only for prompts up to this many tokens (0: all; a full-size model's long "
               "chunked prefill re-reads every expert per chunk: hours)");
  flags.AddBytes("pass-bytes", &pass_bytes, "activation bytes of one planned pass (inferd --prefill-pass-bytes)");
  flags.AddInt("returning", &returning, "returning conversation: tokens of its first turn (0: skip)");
  flags.AddInt("new-tokens", &new_tokens, "returning conversation: tokens of its new turn");
  flags.AddBool("returning-cold", &cold_case, "returning conversation: also the cold case (--no-returning-cold: skip it)");
  flags.AddString("prefix-cache-dir", &prefix_dir, "disk tier directory (default: a fresh temporary one)");
  flags.AddBool("json", &json, "print JSON");
  if (auto st = flags.Parse(argc, argv); !st.ok()) return Fail("bench prefill", st);
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  std::vector<int64_t> lens;
  for (absl::string_view p : absl::StrSplit(prompts_s, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(p, &v) || v < 2) {
      return Fail("bench prefill", absl::InvalidArgumentError(absl::StrCat("--prompts: bad length '", p, "'")));
    }
    lens.push_back(v);
  }
  if (chunked_max < 0) return Fail("bench prefill", absl::InvalidArgumentError("--chunked-max-tokens >= 0"));
  if (chunk < 1 || returning < 0 || new_tokens < 1 || !(share > 0 && share <= 1) || pass_bytes == 0) {
    return Fail("bench prefill", absl::InvalidArgumentError(
                                     "--chunk, --new-tokens >= 1, --returning >= 0, 0 < --expert-share <= 1, "
                                     "--pass-bytes > 0"));
  }
  auto plan = Engine::Plan(model, EngineConfig{});
  if (!plan.ok()) return Fail("bench prefill", plan.status());
  EngineConfig ec;
  ec.expert_budget_bytes = budget > 0 ? static_cast<int64_t>(budget)
                                      : std::max<int64_t>(static_cast<int64_t>(share * plan->expert_total_bytes),
                                                          2 * plan->experts_per_token_bytes);
  auto open = [&]() { return inferd::EngineModel::Open(model, ec, 0); };
  auto probe = open();
  if (!probe.ok()) return Fail("bench prefill", probe.status());
  const ModelConfig cfg = (*probe)->engine().config();
  const int64_t ctx = (*probe)->max_context();
  const int64_t pass_rows = PassRowsForBudget(cfg, static_cast<int64_t>(pass_bytes));
  probe->reset();
  inferd::BatcherConfig chunked;
  chunked.prefill_chunk = chunk;
  chunked.max_step_tokens = std::max<int64_t>(512, chunk);
  inferd::BatcherConfig planned = chunked;
  planned.prefill_pass_rows = pass_rows;
  std::mt19937 rng(1);
  auto random_ids = [&](int64_t n) {
    std::vector<int32_t> v(n);
    std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(cfg.vocab_size) - 1);
    for (auto& t : v) t = d(rng);
    return v;
  };
  nlohmann::json rows = nlohmann::json::array();
  if (!json) {
    std::printf("model %s: %d layers, %d experts x %lld B; expert cache %.3g GB (%.1f%% of %.3g GB); pass %lld rows "
                "(%lld B/row)\n",
                model.c_str(), cfg.num_hidden_layers, cfg.n_routed_experts,
                static_cast<long long>(plan->expert_bytes_each), ec.expert_budget_bytes / 1e9,
                100.0 * ec.expert_budget_bytes / plan->expert_total_bytes, plan->expert_total_bytes / 1e9,
                static_cast<long long>(pass_rows), static_cast<long long>(PassActivationBytesPerRow(cfg)));
    std::printf("%8s %9s | %11s %9s %8s | %11s %9s %8s %6s | %6s\n", "tokens", "distinct", "chunked s", "GB read",
                "x floor", "planned s", "GB read", "x floor", "passes", "speedup");
  }
  for (int64_t want : lens) {
    const int64_t n = std::min(want, ctx - 2);
    const std::vector<int32_t> prompt = random_ids(n);
    Served res[2];
    std::set<std::pair<int, int>> distinct;
    double floor_bytes = 0;  // the distinct experts' stored bytes, each once (records differ by layer)
    const bool run_chunked = chunked_max == 0 || n <= chunked_max;
    for (int planned_mode = run_chunked ? 0 : 1; planned_mode < 2; ++planned_mode) {
      auto m = open();
      if (!m.ok()) return Fail("bench prefill", m.status());
      if (planned_mode) {
        (*m)->engine().mutable_model().set_route_tap([&](int layer, int64_t, std::span<const int> ex) {
          for (int x : ex) distinct.insert({layer, x});
        });
      }
      inferd::Batcher b(m->get(), planned_mode ? planned : chunked);
      res[planned_mode] = Once(b, **m, prompt, "p");
      if (!res[planned_mode].status.ok()) return Fail("bench prefill", res[planned_mode].status);
      b.Shutdown();
      (*m)->engine().mutable_model().set_route_tap(nullptr);
      if (planned_mode) {
        const Container* ct = (*m)->engine().container();
        for (const auto& [layer, expert] : distinct) {
          const ExpertRecordInfo* r = ct != nullptr ? ct->FindExpert(layer, expert) : nullptr;
          floor_bytes += r != nullptr ? static_cast<double>(r->length) : static_cast<double>(plan->expert_bytes_each);
        }
      }
    }
    if (run_chunked && res[0].tokens != res[1].tokens) {
      return Fail("bench prefill", absl::InternalError(absl::StrCat("planned and chunked prefill disagree at ", n,
                                                                    " tokens (batch invariance broken)")));
    }
    nlohmann::json row = {{"tokens", n},
                          {"distinct_experts", distinct.size()},
                          {"distinct_bytes", floor_bytes},
                          {"chunked", run_chunked ? nlohmann::json{{"ttft_s", res[0].ttft},
                                                                   {"bytes", res[0].bytes},
                                                                   {"fetches", res[0].fetches}}
                                                  : nlohmann::json(nullptr)},
                          {"planned",
                           {{"ttft_s", res[1].ttft},
                            {"bytes", res[1].bytes},
                            {"fetches", res[1].fetches},
                            {"passes", res[1].passes}}}};
    rows.push_back(row);
    if (!json && !run_chunked) {
      std::printf("%8lld %9zu | %11s %9s %8s | %11.3f %9.3f %8.2f %6lld | %6s\n", static_cast<long long>(n),
                  distinct.size(), "not run", "-", "-", res[1].ttft, res[1].bytes / 1e9,
                  res[1].bytes / std::max(1.0, floor_bytes), static_cast<long long>(res[1].passes), "-");
    } else if (!json) {
      std::printf("%8lld %9zu | %11.3f %9.3f %8.2f | %11.3f %9.3f %8.2f %6lld | %6.2f\n", static_cast<long long>(n),
                  distinct.size(), res[0].ttft, res[0].bytes / 1e9, res[0].bytes / std::max(1.0, floor_bytes),
                  res[1].ttft, res[1].bytes / 1e9, res[1].bytes / std::max(1.0, floor_bytes),
                  static_cast<long long>(res[1].passes), res[0].ttft / std::max(1e-9, res[1].ttft));
    }
  }
  nlohmann::json ret;
  if (returning > 0) {
    const int64_t n = std::min(returning, ctx - 2 - new_tokens);
    const std::vector<int32_t> first = random_ids(n);
    std::vector<int32_t> second = first;
    const std::vector<int32_t> more = random_ids(new_tokens);
    second.insert(second.end(), more.begin(), more.end());
    std::string dir = prefix_dir;
    if (dir.empty()) {
      dir = (std::filesystem::temp_directory_path() / absl::StrCat("moe_bench_prefill_", ::getpid())).string();
      std::filesystem::remove_all(dir);
    }
    auto with_tier = [&](std::unique_ptr<inferd::EngineModel>& m) -> absl::StatusOr<inferd::BatcherConfig> {
      MOE_ASSIGN_OR_RETURN(std::string identity, m->StateIdentity());
      MOE_ASSIGN_OR_RETURN(auto tier, inferd::PrefixDiskTier::Open(dir, int64_t{64} << 30, identity));
      inferd::BatcherConfig bc = planned;
      bc.prefix_disk = std::move(tier);
      return bc;
    };
    Served cold, ram, disk;
    double reopen_s = 0;
    if (cold_case) {
      auto m = open();
      if (!m.ok()) return Fail("bench prefill", m.status());
      inferd::Batcher b(m->get(), planned);
      cold = Once(b, **m, second, "cold");
    }
    {
      // RAM: the first turn, then the returning one, on one worker.
      auto m = open();
      if (!m.ok()) return Fail("bench prefill", m.status());
      inferd::Batcher b(m->get(), planned);
      Served t1 = Once(b, **m, first, "turn1");
      if (!t1.status.ok()) return Fail("bench prefill", t1.status);
      ram = Once(b, **m, second, "ram");
    }
    {
      // Disk: a worker with the tier serves only the first turn, then goes away.
      auto m = open();
      if (!m.ok()) return Fail("bench prefill", m.status());
      auto bc = with_tier(*m);
      if (!bc.ok()) return Fail("bench prefill", bc.status());
      inferd::Batcher b(m->get(), *bc);
      Served t1 = Once(b, **m, first, "turn1");
      if (!t1.status.ok()) return Fail("bench prefill", t1.status);
      b.Shutdown();  // the spills still waiting are written
    }
    {
      const Clock::time_point t0 = Clock::now();
      auto m = open();
      if (!m.ok()) return Fail("bench prefill", m.status());
      auto bc = with_tier(*m);
      if (!bc.ok()) return Fail("bench prefill", bc.status());
      reopen_s = std::chrono::duration<double>(Clock::now() - t0).count();
      inferd::Batcher b(m->get(), *bc);
      // The restarted worker first serves an unrelated request of the new turn's length (untimed): its
      // weights are paged in and its kernels warm, as in a worker that is up; what is left is the tier's.
      Served warm = Once(b, **m, std::vector<int32_t>(more.begin(), more.end()), "warm");
      if (!warm.status.ok()) return Fail("bench prefill", warm.status);
      disk = Once(b, **m, second, "disk");
    }
    if (prefix_dir.empty()) std::filesystem::remove_all(dir);
    for (const Served* s : {&cold, &ram, &disk}) {
      if (!s->status.ok()) return Fail("bench prefill", s->status);
    }
    if ((cold_case && cold.tokens != ram.tokens) || ram.tokens != disk.tokens) {
      return Fail("bench prefill", absl::InternalError("a returning conversation's token differs by where its KV came from"));
    }
    ret = {{"first_turn_tokens", n},
           {"new_tokens", new_tokens},
           {"cold",
            {{"ttft_s", cold.ttft}, {"cached", cold.cached}, {"bytes", cold.bytes}, {"profile", StepProfileJson(cold.profile, 1, "s")}}},
           {"ram_prefix",
            {{"ttft_s", ram.ttft}, {"cached", ram.cached}, {"bytes", ram.bytes}, {"profile", StepProfileJson(ram.profile, 1, "s")}}},
           {"disk_after_restart",
            {{"ttft_s", disk.ttft},
             {"cached", disk.cached},
             {"bytes", disk.bytes},
             {"model_open_s", reopen_s},
             {"profile", StepProfileJson(disk.profile, 1, "s")}}}};
    if (!json) {
      std::printf("returning conversation: %lld + %lld tokens: cold %.3f s; RAM prefix cache %.3f s (%lld cached); "
                  "disk tier after a restart %.3f s (%lld cached; the restart's model open %.2f s)\n",
                  static_cast<long long>(n), static_cast<long long>(new_tokens), cold.ttft, ram.ttft,
                  static_cast<long long>(ram.cached), disk.ttft, static_cast<long long>(disk.cached), reopen_s);
      std::printf("%-5s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s\n", "case", "forward", "attn", "core", "indexer",
                  "router", "shared", "dense", "experts", "fetch", "other");
      for (auto [name, s] : {std::pair{"cold", &cold}, std::pair{"RAM", &ram}, std::pair{"disk", &disk}}) {
        if (s->profile.forwards == 0) continue;
        const StepProfile& p = s->profile;
        std::printf("%-5s %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f  (s; %lld forwards, %lld rows, %.2f GB read)\n",
                    name, p.total, p.attention, p.attention_core, p.indexer, p.router, p.shared_expert, p.dense_mlp, p.routed_experts,
                    p.expert_fetch, p.Other(), static_cast<long long>(p.forwards), static_cast<long long>(p.rows),
                    s->bytes / 1e9);
      }
    }
  }
  if (json) {
    nlohmann::json out = {{"model", model},
                          {"expert_cache_bytes", ec.expert_budget_bytes},
                          {"expert_total_bytes", plan->expert_total_bytes},
                          {"expert_bytes_each", plan->expert_bytes_each},
                          {"pass_rows", pass_rows},
                          {"chunk", chunk},
                          {"prompts", rows},
                          {"returning", ret}};
    std::printf("%s\n", out.dump(1).c_str());
  }
  return 0;
}

}  // namespace moe::cli
