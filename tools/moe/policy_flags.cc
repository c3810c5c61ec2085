#include "tools/moe/policy_flags.h"

#include <sys/resource.h>

#include <cstdio>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"

namespace moe::cli {
namespace {

absl::Status ParseFormat(const char* flag, const std::string& value, QFormat* out) {
  if (value.empty()) return absl::OkStatus();
  auto f = QFormatFromName(value);
  if (!f) {
    std::string known;
    for (const auto& i : kQFormatTable) absl::StrAppend(&known, known.empty() ? "" : ", ", AV(i.name));
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": unknown format '", value, "' (known: ", known, ")"));
  }
  *out = *f;
  return absl::OkStatus();
}

}  // namespace

void PolicyFlags::Add(FlagSet& flags) {
  flags.AddString("policy", &policy_, "format policy: default (= dense-int8) or dense-int4");
  flags.AddString("experts-format", &experts_, "format of routed experts (default q4_g64)");
  flags.AddString("attention-format", &attention_, "format of attention projections");
  flags.AddString("dense-format", &dense_, "format of dense-layer MLPs");
  flags.AddString("shared-format", &shared_, "format of shared experts");
  flags.AddString("indexer-format", &indexer_, "format of DSA indexer matrices (q8_g128 or bf16)");
  flags.AddString("embed-format", &embed_, "format of embed_tokens (default q8_row)");
  flags.AddString("lm-head-format", &lm_head_, "format of lm_head (default q8_row)");
  flags.AddString("mtp-format", &mtp_, "format of MTP-layer matrices (default q8_g128)");
}

absl::StatusOr<ConvertPolicy> PolicyFlags::Resolve() const {
  MOE_ASSIGN_OR_RETURN(ConvertPolicy p, ConvertPolicy::Named(policy_));
  for (auto [flag, value, dst] :
       {std::tuple<const char*, const std::string*, QFormat*>{"experts-format", &experts_, &p.experts},
        {"attention-format", &attention_, &p.attention},
        {"dense-format", &dense_, &p.dense_mlp},
        {"shared-format", &shared_, &p.shared_experts},
        {"indexer-format", &indexer_, &p.indexer},
        {"embed-format", &embed_, &p.embedding},
        {"lm-head-format", &lm_head_, &p.lm_head},
        {"mtp-format", &mtp_, &p.mtp}}) {
    MOE_RETURN_IF_ERROR(ParseFormat(flag, *value, dst));
  }
  return p;
}

void PrintConvertProgress(const ConvertProgress& p) {
  const double mbs = p.elapsed_s > 0 ? p.bytes_done / 1e6 / p.elapsed_s : 0;
  const double frac = p.bytes_total ? static_cast<double>(p.bytes_done) / p.bytes_total : 1.0;
  const double eta = mbs > 0 ? (p.bytes_total - p.bytes_done) / 1e6 / mbs : 0;
  if (p.shard_finished) {
    rusage ru;
    ::getrusage(RUSAGE_SELF, &ru);
    std::fprintf(stderr, "\rshard %d/%d done in %.1f s; peak RSS %.0f MB%40s\n", p.shard, p.num_shards,
                 p.shard_seconds, ru.ru_maxrss / 1024.0, "");
    return;
  }
  const int width = 30;
  const int filled = static_cast<int>(frac * width);
  std::string bar(filled, '#');
  bar.resize(width, '.');
  std::fprintf(stderr, "\r[%s] shard %d/%d %5.1f%% %8.1f MB/s ETA %d:%02d:%02d ", bar.c_str(), p.shard,
               p.num_shards, 100 * frac, mbs, static_cast<int>(eta) / 3600, static_cast<int>(eta) / 60 % 60,
               static_cast<int>(eta) % 60);
  std::fflush(stderr);
}

}  // namespace moe::cli
