// Shared by `moe bench io` and `moe bench e2e`: the raw device read floor.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "common/expertstore/record_locator.h"

namespace moe::cli {

// Reads every record of `loc` with liburing O_DIRECT, `qd` reads of `chunk`
// bytes in flight, into one buffer (no checksum, no bookkeeping); returns
// GB/s (1e9) of record bytes. The floor the disk sets for the miss path.
absl::StatusOr<double> RawRead(const expertstore::ManifestLocator& loc, int qd, uint64_t chunk);

}  // namespace moe::cli
