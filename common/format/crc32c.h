// CRC32C (Castagnoli) for container records and tensors.
//
// Problem in numbers: expertd verifies every 19 MB expert record it reads
// from disk (2 GB/s per device); the check must cost well under the read. The
// SSE4.2 crc32 instruction, run on three interleaved streams joined by a
// GF(2) shift, does ~15-20 GB/s per core; a table fallback covers
// CPUs without it (chosen once at run time from CPUID).
//
// Stored CRCs are masked (LevelDB habit): a CRC of data that itself contains
// CRCs stays meaningful. Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace moe::crc32c {

// Extends `crc` (0 for a fresh computation) with n bytes.
uint32_t Extend(uint32_t crc, const void* data, size_t n);
inline uint32_t Value(const void* data, size_t n) { return Extend(0, data, n); }

inline constexpr uint32_t kMaskDelta = 0xa282ead8u;
inline uint32_t Mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }
inline uint32_t Unmask(uint32_t masked) {
  const uint32_t rot = masked - kMaskDelta;
  return (rot >> 17) | (rot << 15);
}

}  // namespace moe::crc32c
