// moe convert --in HF_DIR --out DIR: HF FP8/BF16 checkpoint -> moestream container.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/flags.h"
#include "common/base/status.h"
#include "common/format/convert.h"
#include "tools/moe/commands.h"

namespace moe::cli {
namespace {

absl::Status ParseFormat(const std::string& flag, const std::string& value, QFormat* out) {
  if (value.empty()) return absl::OkStatus();
  auto f = QFormatFromName(value);
  if (!f) {
    std::string known;
    for (const auto& i : kQFormatTable) absl::StrAppend(&known, known.empty() ? "" : ", ", AV(i.name));
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": unknown format '", value, "' (known: ", known, ")"));
  }
  *out = *f;
  return absl::OkStatus();
}

void PrintProgress(const ConvertProgress& p) {
  const double mbs = p.elapsed_s > 0 ? p.bytes_done / 1e6 / p.elapsed_s : 0;
  const double frac = p.bytes_total ? static_cast<double>(p.bytes_done) / p.bytes_total : 1.0;
  const double eta = mbs > 0 ? (p.bytes_total - p.bytes_done) / 1e6 / mbs : 0;
  const int width = 30;
  const int filled = static_cast<int>(frac * width);
  std::string bar(filled, '#');
  bar.resize(width, '.');
  std::fprintf(stderr, "\r[%s] shard %d/%d %5.1f%% %8.1f MB/s ETA %d:%02d:%02d ", bar.c_str(),
               p.shard, p.num_shards, 100 * frac, mbs, static_cast<int>(eta) / 3600,
               static_cast<int>(eta) / 60 % 60, static_cast<int>(eta) % 60);
  std::fflush(stderr);
}

}  // namespace

int RunConvert(int argc, char** argv) {
  std::string in, out, policy = "default", verify = "full";
  std::string experts, attention, dense, shared, indexer, embed, lm_head, mtp;
  bool delete_source = false, progress = isatty(STDERR_FILENO) != 0;
  int64_t max_shards = -1;
  FlagSet flags("convert",
                "Convert a Hugging Face FP8 (e4m3 + 128x128 block scales) or BF16 checkpoint "
                "(glm_moe_dsa, deepseek_v3) into a moestream container, one shard at a time. "
                "Re-running with the same arguments resumes an interrupted conversion.");
  flags.AddString("in", &in, "input checkpoint directory (config.json + safetensors shards)");
  flags.AddString("out", &out, "output container directory");
  flags.AddString("policy", &policy, "format policy: default (= dense-int8) or dense-int4");
  flags.AddString("experts-format", &experts, "format of routed experts (default q4_g64)");
  flags.AddString("attention-format", &attention, "format of attention projections");
  flags.AddString("dense-format", &dense, "format of dense-layer MLPs");
  flags.AddString("shared-format", &shared, "format of shared experts");
  flags.AddString("indexer-format", &indexer, "format of DSA indexer matrices (q8_g128 or bf16)");
  flags.AddString("embed-format", &embed, "format of embed_tokens (default q8_row)");
  flags.AddString("lm-head-format", &lm_head, "format of lm_head (default q8_row)");
  flags.AddString("mtp-format", &mtp, "format of MTP-layer matrices (default q8_g128)");
  flags.AddBool("delete-source", &delete_source,
                "delete each input shard once every output that reads it is durably written");
  flags.AddString("verify", &verify, "on resume, check finished shards: full (all CRCs) or quick");
  flags.AddInt("max-shards", &max_shards, "stop after writing this many output shards (-1: all)");
  flags.AddBool("progress", &progress, "show a progress bar (default: when stderr is a terminal)");
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
  auto pol = ConvertPolicy::Named(policy);
  if (!pol.ok()) return Fail("convert", pol.status());
  ConvertOptions o;
  o.policy = *pol;
  for (auto [flag, value, dst] :
       {std::tuple<const char*, std::string*, QFormat*>{"experts-format", &experts, &o.policy.experts},
        {"attention-format", &attention, &o.policy.attention},
        {"dense-format", &dense, &o.policy.dense_mlp},
        {"shared-format", &shared, &o.policy.shared_experts},
        {"indexer-format", &indexer, &o.policy.indexer},
        {"embed-format", &embed, &o.policy.embedding},
        {"lm-head-format", &lm_head, &o.policy.lm_head},
        {"mtp-format", &mtp, &o.policy.mtp}}) {
    if (auto s = ParseFormat(flag, *value, dst); !s.ok()) return Fail("convert", s);
  }
  o.in_dir = in;
  o.out_dir = out;
  o.delete_source = delete_source;
  o.verify_full = verify == "full";
  o.max_shards = static_cast<int>(max_shards);
  if (progress) o.progress = PrintProgress;
  auto r = ConvertCheckpoint(o);
  if (progress) std::fputs("\n", stderr);
  if (!r.ok()) return Fail("convert", r.status());
  std::printf("%s: %d shards (%d written, %d already done), %.1f MB in -> %.1f MB out in %.1f s "
              "(%.1f MB/s)%s\n",
              out.c_str(), r->num_shards, r->shards_written, r->shards_verified, r->bytes_in / 1e6,
              r->bytes_out / 1e6, r->seconds, r->seconds > 0 ? r->bytes_in / 1e6 / r->seconds : 0.0,
              r->complete ? "" : " [incomplete: run again to continue]");
  for (const auto& d : r->deleted) std::printf("deleted input %s\n", d.c_str());
  return 0;
}

}  // namespace moe::cli
