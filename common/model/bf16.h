// bfloat16 <-> float32 helpers used to reproduce Hugging Face's BF16 rounding
// points (docs/MODEL.md section 4: activations are BF16 between ops in HF).
// Round-to-nearest-even, NaN preserved. Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <cstring>

namespace moe {

inline uint16_t F32ToBF16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  const uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return static_cast<uint16_t>(u >> 16);
}

inline float BF16BitsToF32(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float RoundBF16(float f) { return BF16BitsToF32(F32ToBF16Bits(f)); }

// Smallest finite bf16 (torch.finfo(torch.bfloat16).min), HF's mask value.
inline constexpr float kBF16Lowest = -3.3895313892515355e38f;

}  // namespace moe
