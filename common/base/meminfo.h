// Fields of /proc/meminfo in bytes (MemTotal, MemAvailable, ...): what the
// machine has, for the memory plans that must never overcommit it.
// Thread safety: reentrant (reads the file each call).
#pragma once

#include <cstdint>
#include <string_view>

namespace moe {

// The field's value in bytes ("MemTotal" -> its kB x 1024); -1 if absent or
// the file cannot be read.
int64_t MemInfoBytes(std::string_view field);

}  // namespace moe
