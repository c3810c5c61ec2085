// moe plan --model DIR --ram BYTES [--context N] [--workers N --expertd] [--json] [--out FILE]:
// the serving plan (common/model/serving_planner.h, docs/PLAN.md) - resident
// formats and bytes, KV per token and the context that fits, the expert
// cache and its hit rate, bytes per token from RAM and disk, the floor tok/s
// from bandwidths measured now. `--out FILE` writes the plan that moe run,
// inferd and expertd apply with --plan FILE. What does not fit is refused,
// naming the part (exit 1).
#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/flags.h"
#include "common/base/status.h"
#include "common/expertstore/cache_sim.h"
#include "common/model/serving_planner.h"
#include "tools/moe/commands.h"

namespace moe::cli {
namespace {

absl::Status DoPlan(int argc, char** argv, bool* help) {
  PlanRequest r;
  std::string kv = "f32", index_keys = "auto", routing, out;
  bool json = false, no_mtp = false;
  int64_t workers = 1;
  uint64_t overhead = r.process_overhead_bytes, reserve = r.reserve_bytes;
  FlagSet flags("plan",
                "The serving plan of a model in a RAM budget: resident formats, KV and context, expert cache, "
                "bytes per token from RAM and disk, floor tok/s (docs/PLAN.md). --out writes it for --plan.");
  flags.AddString("model", &r.model_dir, "container (or HF checkpoint: the plan picks the conversion policy)");
  flags.AddBytes("ram", &r.ram_bytes, "RAM for all serving processes together (K/M/G/T, binary)");
  flags.AddInt("context", &r.context, "KV tokens per worker (default: 8192, or what fits)");
  flags.AddInt("workers", &workers, "inferd workers (several share one expertd: --expertd)");
  flags.AddBool("expertd", &r.expertd, "routed experts in one expertd shared by the workers");
  flags.AddString("kv-dtype", &kv, "KV cache storage: f32 or bf16");
  flags.AddString("index-keys", &index_keys,
                  "DSA index keys in the KV: auto (int8 where kv_b is integer), exact (the KV dtype) or q8");
  flags.AddBool("no-mtp", &no_mtp, "do not load the MTP layer");
  flags.AddDouble("mem-gbps", &r.mem_gbps, "memory read bandwidth in GB/s (default: measured now)");
  flags.AddDouble("disk-gbps", &r.disk_gbps, "disk read bandwidth in GB/s (default: measured now, O_DIRECT)");
  flags.AddString("routing", &routing,
                  "a recorded routing trace (moe run --record-routing): expert popularity for the hit rate "
                  "(default: uniform)");
  flags.AddBytes("process-overhead", &overhead, "RAM per process beyond weights, KV and cache");
  flags.AddBytes("reserve", &reserve, "RAM left free for the system");
  flags.AddBool("json", &json, "print the plan as JSON");
  flags.AddString("out", &out, "also write the JSON plan to this file (for --plan)");
  MOE_RETURN_IF_ERROR(flags.Parse(argc, argv));
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    *help = true;
    return absl::OkStatus();
  }
  if (r.model_dir.empty()) return absl::InvalidArgumentError("--model is required");
  if (!flags.WasSet("ram")) return absl::InvalidArgumentError("--ram is required");
  if (kv != "f32" && kv != "bf16") return absl::InvalidArgumentError("--kv-dtype must be f32 or bf16");
  if (flags.WasSet("context") && r.context < 1) return absl::InvalidArgumentError("--context must be >= 1");
  if (r.mem_gbps < 0 || r.disk_gbps < 0) return absl::InvalidArgumentError("--mem-gbps and --disk-gbps must be > 0");
  r.kv_dtype = kv == "f32" ? KvDtype::kF32 : KvDtype::kBF16;
  absl::StatusOr<IndexKeys> ik = ParseIndexKeys(index_keys);
  if (!ik.ok()) return Annotate(ik.status(), "--index-keys");
  r.index_keys = *ik;
  r.workers = static_cast<int>(workers);
  r.load_mtp = !no_mtp;
  r.process_overhead_bytes = overhead;
  r.reserve_bytes = reserve;
  if (!routing.empty()) {
    auto t = expertstore::LoadTrace(routing);
    if (!t.ok()) return Annotate(t.status(), "--routing");
    std::map<uint32_t, double> count;
    for (uint32_t k : t->keys) count[k] += 1;
    for (const auto& [k, n] : count) r.expert_popularity.push_back(n);
    r.popularity_source = routing;
  }
  MOE_ASSIGN_OR_RETURN(ServingPlan p, MakeServingPlan(r));
  const std::string j = p.ToJson();
  if (!out.empty()) {
    std::ofstream f(out, std::ios::binary | std::ios::trunc);
    f << j;
    f.close();
    if (!f) return absl::UnavailableError(absl::StrCat("--out ", out, ": write failed"));
  }
  std::fputs(json ? j.c_str() : p.ToText().c_str(), stdout);
  return absl::OkStatus();
}

}  // namespace

int RunPlan(int argc, char** argv) {
  bool help = false;
  if (auto s = DoPlan(argc, argv, &help); !s.ok()) return Fail("plan", s);
  return 0;
}

}  // namespace moe::cli
