// moe bench dense --model DIR [--cached 300,2048,8192,32768] [--batches 1,4,16,32] [--batch-cached 1024]
//                 [--steps 4] [--repeats 3] [--threads 2] [--json]
//
// The resident (dense) path of decode against its floor, measured in one run:
// a decode token must read every resident matrix once (embedding: one row;
// the MTP layer: not at all) plus the KV it attends (DSA: every cached
// indexer key, at most index_topk latents per layer); those bytes over the
// memory read bandwidth measured just before (2 threads, 512 MiB) are the
// floor. The resident path's time is the forward minus routed-expert compute
// and fetch (Model::set_profile), so a model with hole experts measures it.
// KV caches of T tokens are synthesized (random latents and keys), so long
// contexts cost no prefill. Batched decode (B sequences, one ForwardBatch)
// is reported as the dense matrices' int8 multiply-adds per second against
// the IDOT peak measured in the same run (kernels::MeasureIdotPeakGops).
// Figures are wall clock and CPU time (bytes / (process CPU seconds /
// threads)): the CPU-time ratio stays meaningful on a shared machine.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/bandwidth_probe.h"
#include "common/base/flags.h"
#include "common/base/status.h"
#include "common/kernels/kernels.h"
#include "common/model/engine.h"
#include "nlohmann/json.hpp"
#include "tools/moe/commands.h"

namespace moe::cli {
namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

absl::StatusOr<std::vector<int64_t>> ParseList(const std::string& flag, const std::string& s) {
  std::vector<int64_t> out;
  for (absl::string_view p : absl::StrSplit(AV(s), ',', absl::SkipEmpty())) {
    int64_t v;
    if (!absl::SimpleAtoi(p, &v) || v < 1)
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", p, "' is not a positive integer"));
    out.push_back(v);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty"));
  return out;
}

// A cache holding T tokens of plausible values (unit-spread latents and keys).
KvCache SyntheticCache(const ModelConfig& c, KvDtype dt, bool index_q8, int64_t T, uint64_t seed) {
  KvCache cache = KvCache::ForModel(c, dt, /*mtp=*/false, index_q8);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t w = std::max({c.kv_lora_rank, c.qk_rope_head_dim, c.index_head_dim});
  std::vector<float> row(w);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    for (int64_t t = 0; t < T; ++t) {
      for (KvCache::Stream s : {KvCache::kRope, KvCache::kIndexKey, KvCache::kLatent}) {
        if (s == KvCache::kIndexKey && !cache.has_index_key(l)) continue;
        for (int64_t i = 0; i < cache.width(s); ++i) row[i] = nd(rng);
        cache.Append(l, s, row.data());
      }
    }
  }
  return cache;
}

struct Bytes {
  int64_t resident = 0;   // read per token: every resident matrix except embedding and MTP, + one embedding row
  int64_t kv = 0;         // KV read per token at the context
  int64_t dense_macs = 0; // multiply-adds per row of the dense matrices (int8 kernels)
};

Bytes PerToken(const Model& m, int64_t T, KvDtype dt, bool index_q8) {
  const ModelConfig& c = m.config();
  const ModelWeights& w = m.weights();
  Bytes b;
  b.resident = w.Bytes() - w.embed.Bytes() + w.embed.Bytes() / std::max<int64_t>(c.vocab_size, 1);
  if (w.mtp) b.resident -= w.mtp->layer.Bytes() + w.mtp->eh_proj.Bytes() + 12 * static_cast<int64_t>(w.mtp->enorm.size());
  auto macs = [](const OwnedMatrix& x) { return Info(x.m.format).integer ? x.m.rows * x.m.cols : 0; };
  for (const LayerWeights& l : w.layers)
    for (const OwnedMatrix* x : {&l.q_a, &l.q_b, &l.kv_a, &l.o, &l.idx_wq_b, &l.idx_wk, &l.gate, &l.up, &l.down,
                                 &l.sh_gate, &l.sh_up, &l.sh_down})
      b.dense_macs += macs(*x);
  b.dense_macs += macs(w.lm_head);
  // KV read: the attended latents and rope keys, and every cached index key.
  const int64_t latent = KvLatentBytesPerToken(c, dt);
  const int64_t attended = c.has_indexer ? std::min<int64_t>(T, c.index_topk) : T;
  b.kv = attended * latent + T * (KvBytesPerToken(c, dt, index_q8) - latent);
  return b;
}

struct Timing {
  double wall_s = 0, cpu_s = 0;  // per step (median)
  StepProfile prof;              // summed over all timed steps
  int64_t steps = 0;
};

// Decode `steps` tokens for each sequence from copies of `start`, `repeats` times.
absl::StatusOr<Timing> Decode(Model& m, const std::vector<KvCache>& start, int steps, int repeats) {
  Timing t;
  std::vector<double> wall, cpu;
  StepProfile prof;
  m.set_profile(&prof);
  for (int rep = -1; rep < repeats; ++rep) {  // rep -1: warm-up (experts cached, pages faulted in)
    std::vector<KvCache> caches = start;
    const size_t B = caches.size();
    // Room for the steps: in serving a cache grows geometrically (amortized),
    // a fresh copy would reallocate every stream on its first step.
    for (KvCache& kc : caches) kc.Reserve(kc.length() + steps);
    std::vector<int32_t> next(B);
    for (size_t i = 0; i < B; ++i) next[i] = static_cast<int32_t>((17 + 31 * i) % m.config().vocab_size);
    for (int s = 0; s < steps; ++s) {
      std::vector<std::vector<int32_t>> ids(B);
      std::vector<BatchSeq> batch(B);
      for (size_t i = 0; i < B; ++i) {
        ids[i] = {next[i]};
        batch[i] = BatchSeq{ids[i], &caches[i], false, true};
      }
      const StepProfile before = prof;
      const double c0 = ProcessCpuSeconds();
      const auto t0 = Clock::now();
      auto out = m.ForwardBatch(batch);
      const double w = std::chrono::duration<double>(Clock::now() - t0).count();
      const double c = ProcessCpuSeconds() - c0;
      if (!out.ok()) {
        m.set_profile(nullptr);
        return out.status();
      }
      for (size_t i = 0; i < B; ++i) next[i] = Argmax((*out)[i].logits.data(), m.config().vocab_size);
      if (rep < 0) {
        prof = before;  // the warm-up does not count
        continue;
      }
      wall.push_back(w);
      cpu.push_back(c);
      ++t.steps;
    }
  }
  m.set_profile(nullptr);
  t.wall_s = Median(wall);
  t.cpu_s = Median(cpu);
  t.prof = prof;
  return t;
}

double ResidentSeconds(const StepProfile& p) { return p.total - p.routed_experts - p.expert_fetch; }

nlohmann::json ProfileMs(const StepProfile& p, int64_t steps) {
  const double k = 1e3 / std::max<int64_t>(1, steps);
  return {{"attention", p.attention * k}, {"attention_core", p.attention_core * k}, {"indexer", p.indexer * k},   {"router", p.router * k},
          {"shared_expert", p.shared_expert * k}, {"dense_mlp", p.dense_mlp * k}, {"lm_head", p.lm_head * k},
          {"embed", p.embed * k}, {"other", p.Other() * k}, {"routed_experts", p.routed_experts * k},
          {"expert_fetch", p.expert_fetch * k}, {"total", p.total * k}};
}

absl::Status DoBenchDense(int argc, char** argv, bool* help) {
  std::string model, cached_s = "300,2048,8192,32768", batches_s = "1,4,16,32", kv = "bf16", index_keys = "auto";
  int64_t steps = 4, repeats = 3, batch_cached = 1024, threads = 2;
  bool json = false;
  FlagSet flags("bench dense", "The resident path of decode vs its floor (bytes over measured memory bandwidth).");
  flags.AddString("model", &model, "a converted container (hole experts are fine: experts are excluded)");
  flags.AddString("cached", &cached_s, "cached tokens per measurement (synthesized KV)");
  flags.AddString("batches", &batches_s, "sequences per step for the batched measurement");
  flags.AddInt("batch-cached", &batch_cached, "cached tokens of each sequence in the batched measurement");
  flags.AddInt("steps", &steps, "decode steps per repeat");
  flags.AddInt("repeats", &repeats, "repeats (median reported)");
  flags.AddInt("threads", &threads, "threads of the memory probe and the CPU-time figures");
  flags.AddString("kv-dtype", &kv, "KV cache storage: f32 or bf16");
  flags.AddString("index-keys", &index_keys, "DSA index keys: auto, exact or q8 (as --index-keys of moe run)");
  flags.AddBool("json", &json, "print JSON");
  MOE_RETURN_IF_ERROR(flags.Parse(argc, argv));
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    *help = true;
    return absl::OkStatus();
  }
  if (model.empty()) return absl::InvalidArgumentError("--model is required");
  if (steps < 1 || repeats < 1 || threads < 1) return absl::InvalidArgumentError("--steps, --repeats, --threads >= 1");
  if (kv != "f32" && kv != "bf16") return absl::InvalidArgumentError("--kv-dtype must be f32 or bf16");
  MOE_ASSIGN_OR_RETURN(std::vector<int64_t> cached, ParseList("cached", cached_s));
  MOE_ASSIGN_OR_RETURN(std::vector<int64_t> batches, ParseList("batches", batches_s));
  EngineConfig ec;
  ec.kv_dtype = kv == "f32" ? KvDtype::kF32 : KvDtype::kBF16;
  ec.load_mtp = false;
  {
    absl::StatusOr<IndexKeys> ik = ParseIndexKeys(index_keys);
    if (!ik.ok()) return Annotate(ik.status(), "--index-keys");
    ec.index_keys = *ik;
  }
  MOE_ASSIGN_OR_RETURN(auto eng, Engine::Open(model, ec));
  const bool q8 = eng->index_q8();
  Model& m = eng->mutable_model();
  const ModelConfig& c = m.config();
  for (int64_t T : cached)
    if (T + steps > c.max_position_embeddings)
      return absl::InvalidArgumentError(absl::StrCat("--cached ", T, " + steps exceed the model's positions"));
  const double idot_peak = kernels::MeasureIdotPeakGops(kernels::Isa::kAuto, 0.2);
  nlohmann::json out = {{"model", model}, {"kv_dtype", kv}, {"index_keys", q8 ? "q8" : "exact"},
                        {"layers", c.num_hidden_layers},
                        {"idot_peak_gops_per_core", idot_peak}};
  nlohmann::json rows = nlohmann::json::array();
  if (!json)
    std::printf("%-8s %10s %10s %10s %8s %8s %9s %9s %9s  (ms per token; floor = bytes / memory read GB/s)\n",
                "cached", "resident", "floor", "GB/s", "ratio", "cpu_r", "indexer", "attention", "attn_core");
  for (int64_t T : cached) {
    std::vector<KvCache> start;
    start.push_back(SyntheticCache(c, ec.kv_dtype, q8, T, 7 + T));
    const ReadBandwidth bw = ProbeMemoryReadFresh(MemoryProbeBytes(), static_cast<int>(threads), 3);
    MOE_ASSIGN_OR_RETURN(Timing t, Decode(m, start, static_cast<int>(steps), static_cast<int>(repeats)));
    const Bytes b = PerToken(m, T, ec.kv_dtype, q8);
    const double res_s = ResidentSeconds(t.prof) / t.steps;
    const double share = t.prof.total > 0 ? ResidentSeconds(t.prof) / t.prof.total : 1;
    const double floor_s = (b.resident + b.kv) / (bw.wall_gbps * 1e9);
    const double cpu_res_s = t.cpu_s / threads * share;
    const double cpu_floor_s = (b.resident + b.kv) / (bw.cpu_gbps * 1e9);
    nlohmann::json r = {{"cached", T},
                        {"resident_bytes", b.resident},
                        {"kv_bytes", b.kv},
                        {"mem_gbps", bw.wall_gbps},
                        {"mem_cpu_gbps", bw.cpu_gbps},
                        {"step_ms", t.wall_s * 1e3},
                        {"resident_ms", res_s * 1e3},
                        {"floor_ms", floor_s * 1e3},
                        {"ratio", res_s > 0 ? floor_s / res_s : 0},
                        {"cpu_ratio", cpu_res_s > 0 ? cpu_floor_s / cpu_res_s : 0},
                        {"breakdown_ms", ProfileMs(t.prof, t.steps)}};
    rows.push_back(r);
    if (!json)
      std::printf("%-8lld %10.2f %10.2f %10.2f %8.2f %8.2f %9.2f %9.2f %9.2f\n", static_cast<long long>(T),
                  res_s * 1e3, floor_s * 1e3, bw.wall_gbps, res_s > 0 ? floor_s / res_s : 0.0,
                  cpu_res_s > 0 ? cpu_floor_s / cpu_res_s : 0.0, t.prof.indexer * 1e3 / t.steps,
                  t.prof.attention * 1e3 / t.steps, t.prof.attention_core * 1e3 / t.steps);
  }
  out["single"] = rows;
  nlohmann::json brows = nlohmann::json::array();
  if (!json)
    std::printf("\n%-6s %10s %10s %12s %10s   (batched decode at %lld cached; peak = IDOT x %lld threads)\n", "B",
                "step_ms", "tok/s", "dense GOPS", "of peak", static_cast<long long>(batch_cached),
                static_cast<long long>(threads));
  const KvCache base = SyntheticCache(c, ec.kv_dtype, q8, batch_cached, 99);
  for (int64_t B : batches) {
    std::vector<KvCache> start(static_cast<size_t>(B), base);
    MOE_ASSIGN_OR_RETURN(Timing t, Decode(m, start, static_cast<int>(steps), static_cast<int>(repeats)));
    const Bytes b = PerToken(m, batch_cached, ec.kv_dtype, q8);
    const double res_s = ResidentSeconds(t.prof) / t.steps;
    const double gops = res_s > 0 ? 2.0 * b.dense_macs * B / res_s * 1e-9 : 0;
    const double of_peak = idot_peak > 0 ? gops / (idot_peak * threads) : 0;
    brows.push_back({{"batch", B}, {"step_ms", t.wall_s * 1e3}, {"resident_ms", res_s * 1e3},
                     {"tokens_per_second", t.wall_s > 0 ? B / t.wall_s : 0}, {"dense_gops", gops},
                     {"of_idot_peak", of_peak}, {"breakdown_ms", ProfileMs(t.prof, t.steps)}});
    if (!json)
      std::printf("%-6lld %10.2f %10.1f %12.1f %10.2f\n", static_cast<long long>(B), t.wall_s * 1e3,
                  t.wall_s > 0 ? B / t.wall_s : 0.0, gops, of_peak);
  }
  out["batched"] = brows;
  if (json) std::printf("%s\n", out.dump().c_str());
  return absl::OkStatus();
}

}  // namespace

int RunBenchDense(int argc, char** argv) {
  bool help = false;
  if (auto s = DoBenchDense(argc, argv, &help); !s.ok()) return Fail("bench dense", s);
  return 0;
}

}  // namespace moe::cli
