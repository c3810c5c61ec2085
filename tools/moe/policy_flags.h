// The conversion-policy flags shared by `moe convert` and `moe synth
// --container`: --policy and one format flag per tensor role.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/base/flags.h"
#include "common/format/convert.h"

namespace moe::cli {

class PolicyFlags {
 public:
  void Add(FlagSet& flags);
  // The named policy with every format flag given applied; errors name the flag.
  absl::StatusOr<ConvertPolicy> Resolve() const;

 private:
  std::string policy_ = "default";
  std::string experts_, attention_, dense_, shared_, indexer_, embed_, lm_head_, mtp_;
};

// A progress bar with ETA on stderr (one line, redrawn) and one line per
// finished output shard: its conversion time, MB/s and the process peak RSS.
void PrintConvertProgress(const ConvertProgress& p);

}  // namespace moe::cli
