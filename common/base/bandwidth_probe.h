// This machine's memory read and disk read bandwidth, measured now: the
// floors that `moe plan` and the benchmarks compare against (machines of the
// same kind differ 2x in memory bandwidth: docs/BENCHMARKS.md).
//
// Memory: `threads` threads stream a buffer the caller owns (8 independent
// sums per 64-byte line, software prefetch 2 KiB ahead: as well as the
// kernels stream). Disk: O_DIRECT reads of `block` bytes at the given file
// ranges, `threads` reads in flight (one per thread), every byte read once.
// Thread safety: functions are reentrant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace moe {

struct ReadBandwidth {
  double wall_gbps = 0;  // bytes / wall seconds (1e9)
  double cpu_gbps = 0;   // bytes / (process CPU seconds / threads): what the
                         // threads reach while they run (robust to a shared CPU)
};

// Median of `reps` passes over buf[0, bytes).
ReadBandwidth ProbeMemoryRead(const uint8_t* buf, size_t bytes, int threads, int reps);

// Allocates and fills `bytes`, then ProbeMemoryRead. To measure memory, not
// the cache, pass MemoryProbeBytes().
ReadBandwidth ProbeMemoryReadFresh(size_t bytes, int threads, int reps);

// A buffer well past the last-level cache: 4 x L3 (sysconf), at least
// 512 MiB. A fixed 512 MiB is not: this host's L3 is 480 MiB (shared with
// other tenants), and probes over 512 MiB and 960 MiB read anywhere from 19
// to 34 GB/s, where 2 and 4 GiB read 24-27, the rate the weights stream at
// (docs/BENCHMARKS.md, "the resident path").
size_t MemoryProbeBytes();

struct FileRange {
  std::string path;
  uint64_t offset = 0, length = 0;
};
// GB/s (1e9) of O_DIRECT reads over `ranges` (offsets/lengths rounded out to
// 4 KiB). Ranges should hold real bytes: holes read as zeros without I/O.
// Errors name the file.
absl::StatusOr<double> ProbeDiskRead(const std::vector<FileRange>& ranges, uint64_t block, int threads);

double ProcessCpuSeconds();

}  // namespace moe
