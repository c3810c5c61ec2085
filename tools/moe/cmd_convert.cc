// moe convert --in HF_DIR --out DIR: HF FP8/BF16 checkpoint -> moestream container.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/flags.h"
#include "common/base/status.h"
#include "common/format/convert.h"
#include "common/model/serving_planner.h"
#include "nlohmann/json.hpp"
#include "tools/moe/commands.h"
#include "tools/moe/policy_flags.h"

namespace moe::cli {

int RunConvert(int argc, char** argv) {
  std::string in, out, verify = "full", plan_file;
  bool delete_source = false, progress = isatty(STDERR_FILENO) != 0, json = false;
  int64_t max_shards = -1;
  PolicyFlags policy;
  FlagSet flags("convert",
                "Convert a Hugging Face FP8 (e4m3 + 128x128 block scales) or BF16 checkpoint "
                "(glm_moe_dsa, deepseek_v3) into a moestream container, one shard at a time. "
                "Re-running with the same arguments resumes an interrupted conversion.");
  flags.AddString("in", &in, "input checkpoint directory (config.json + safetensors shards)");
  flags.AddString("out", &out, "output container directory");
  policy.Add(flags);
  flags.AddString("plan", &plan_file,
                  "a serving plan of this checkpoint (moe plan --model HF_DIR --ram ... --out FILE): convert with "
                  "the policy it chose");
  flags.AddBool("delete-source", &delete_source,
                "delete each input shard once every output that reads it is durably written");
  flags.AddString("verify", &verify, "on resume, check finished shards: full (all CRCs) or quick");
  flags.AddInt("max-shards", &max_shards, "stop after writing this many output shards (-1: all)");
  flags.AddBool("progress", &progress,
                "show a progress bar with ETA and one line per finished shard (default: when stderr is a terminal)");
  flags.AddBool("json", &json, "print the result as JSON, with every shard's time, bytes and the peak RSS");
  if (auto s = flags.Parse(argc, argv); !s.ok()) return Fail("convert", s);
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (in.empty() || out.empty()) {
    return Fail("convert", absl::InvalidArgumentError("--in and --out are required"));
  }
  if (verify != "full" && verify != "quick") {
    return Fail("convert", absl::InvalidArgumentError("--verify must be full or quick"));
  }
  ConvertOptions o;
  auto pol = policy.Resolve();
  if (!pol.ok()) return Fail("convert", pol.status());
  o.policy = *pol;
  if (!plan_file.empty()) {
    for (const char* f : {"policy", "experts-format", "attention-format", "dense-format", "shared-format",
                          "indexer-format", "embed-format", "lm-head-format", "mtp-format"}) {
      if (flags.WasSet(f))
        return Fail("convert", absl::InvalidArgumentError(absl::StrCat("give --plan or --", f, ", not both")));
    }
    auto plan = LoadServingPlan(plan_file);
    if (!plan.ok()) return Fail("convert", plan.status());
    if (auto s = CheckPlanMatchesModel(*plan, in); !s.ok()) return Fail("convert", Annotate(s, "--plan"));
    auto named = ConvertPolicy::Named(plan->policy);
    if (!named.ok())
      return Fail("convert", absl::InvalidArgumentError(absl::StrCat(
                                 "--plan ", plan_file, ": policy '", plan->policy,
                                 "' is not a conversion policy (was the plan made for a container?)")));
    o.policy = *named;
  }
  o.in_dir = in;
  o.out_dir = out;
  o.delete_source = delete_source;
  o.verify_full = verify == "full";
  o.max_shards = static_cast<int>(max_shards);
  if (progress) o.progress = PrintConvertProgress;
  auto r = ConvertCheckpoint(o);
  if (progress) std::fputs("\n", stderr);
  if (!r.ok()) return Fail("convert", r.status());
  if (json) {
    nlohmann::json shards = nlohmann::json::array();
    for (const auto& s : r->shards) {
      shards.push_back({{"file", s.file},
                        {"bytes_in", s.bytes_in},
                        {"bytes_out", s.bytes_out},
                        {"bytes_written", s.bytes_written},
                        {"records", s.records},
                        {"zero_records", s.zero_records},
                        {"seconds", s.seconds},
                        {"peak_rss_bytes", s.peak_rss_bytes}});
    }
    nlohmann::json j = {{"out", out},
                        {"num_shards", r->num_shards},
                        {"shards_written", r->shards_written},
                        {"shards_verified", r->shards_verified},
                        {"bytes_in", r->bytes_in},
                        {"bytes_out", r->bytes_out},
                        {"seconds", r->seconds},
                        {"complete", r->complete},
                        {"peak_rss_bytes", r->peak_rss_bytes},
                        {"deleted", r->deleted},
                        {"shards", shards}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%s: %d shards (%d written, %d already done), %.1f MB in -> %.1f MB out in %.1f s "
              "(%.1f MB/s), peak RSS %.0f MB%s\n",
              out.c_str(), r->num_shards, r->shards_written, r->shards_verified, r->bytes_in / 1e6,
              r->bytes_out / 1e6, r->seconds, r->seconds > 0 ? r->bytes_in / 1e6 / r->seconds : 0.0,
              r->peak_rss_bytes / 1e6, r->complete ? "" : " [incomplete: run again to continue]");
  for (const auto& d : r->deleted) std::printf("deleted input %s\n", d.c_str());
  return 0;
}

}  // namespace moe::cli
