#include "common/base/env_var.h"

#include <cstdlib>

namespace moe {

std::optional<std::string> GetEnvVar(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

}  // namespace moe
