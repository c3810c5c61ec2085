// Shared by the `moe bench` programs that compare against a Python reference (tokenize,
// chat): running the reference as a subprocess and summarising repeated timings.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace moe::cli {

// Runs `cmd` through the shell and returns its stdout; Unavailable when it cannot start or
// exits non-zero.
absl::StatusOr<std::string> RunCommand(const std::string& cmd);

// Median, min and max of repeated measurements (machines are noisy: report the spread).
struct Spread {
  double median = 0, min = 0, max = 0;
};
Spread SpreadOf(std::vector<double> v);

}  // namespace moe::cli
