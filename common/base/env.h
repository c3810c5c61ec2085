// The one place that reads the process environment (STYLE.md habit 9:
// no getenv outside common/base). Configuration is flags + one config file;
// environment variables are limited to the few documented in README.md.
#pragma once

#include <optional>
#include <string>

namespace moe {

std::optional<std::string> GetEnv(const char* name);

}  // namespace moe
