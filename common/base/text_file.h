// A whole small file (a config, a map, a token) as a string. NotFound names the
// path when it cannot be opened, DataLoss when reading fails part-way.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace moe {

absl::StatusOr<std::string> ReadTextFile(const std::string& path);

}  // namespace moe
