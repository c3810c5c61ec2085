// Reads one environment variable: the one place that calls getenv (no
// getenv outside common/base). Configuration is flags + one config file;
// the environment variables it serves are listed in README.md (today one:
// MOE_KERNEL_ISA, read by common/kernels/kernels.cc).
#pragma once

#include <optional>
#include <string>

namespace moe {

// The variable's value, or nullopt when it is not set.
std::optional<std::string> GetEnvVar(const char* name);

}  // namespace moe
