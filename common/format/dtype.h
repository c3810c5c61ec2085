// Element types of safetensors checkpoints and their exact decoders.
//
// Problem in numbers: a GLM-5.x FP8 checkpoint is ~756 GB, mostly
// float8_e4m3fn weights (1 byte each) with fp32 128x128 block scales; the
// rest is BF16 (embeddings, norms, router) and a little F32. Conversion
// decodes every one of those elements once, so the decoders are branch-light
// table/bit operations, and they are EXACT: FP8 for all 256 codes, F16 and
// BF16 for all 65536 codes (tests compare against ml_dtypes tables).
//
// Contract:
//   - DType names are the safetensors dtype strings ("F32", "BF16",
//     "F8_E4M3", ...). DTypeFromName is case-sensitive, as the format is.
//   - Encoded values are little-endian in memory (x86/ARM hosts).
//   - F8_E4M3 is float8_e4m3fn: bias 7, no infinities; 0x7F / 0xFF are NaN;
//     the largest finite magnitude is 448; 0x80 is -0.
//   - F32ToBf16 rounds to nearest, ties to even; NaN stays NaN (quiet), and
//     the sign of zero and infinities is preserved.
//
// Thread safety: everything here is a pure function of its arguments.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "absl/status/status.h"

namespace moe {

enum class DType : uint8_t {
  kF32 = 0,
  kF16 = 1,
  kBF16 = 2,
  kF8E4M3 = 3,  // float8_e4m3fn
  kI8 = 4,
  kU8 = 5,
  kI32 = 6,
  kI64 = 7,
  kBool = 8,
  kF64 = 9,
};

inline constexpr int kNumDTypes = 10;

// The safetensors dtype string, e.g. "F8_E4M3".
std::string_view DTypeName(DType d);
// Inverse of DTypeName; nullopt for names we do not support (e.g. "F8_E5M2").
std::optional<DType> DTypeFromName(std::string_view name);
// Bytes per element.
int DTypeSize(DType d);
// True for floating-point types (F32, F16, BF16, F8_E4M3, F64).
bool DTypeIsFloat(DType d);

// ---- scalar conversions (exact) ----------------------------------------------

inline float BitsToF32(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}
inline uint32_t F32ToBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

inline float Bf16ToF32(uint16_t h) { return BitsToF32(static_cast<uint32_t>(h) << 16); }

// IEEE binary16 -> binary32, exact for every code (subnormals, inf, NaN
// payloads are shifted into the float's mantissa).
inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1F) {  // inf / NaN
    bits = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {  // normal
    bits = sign | ((exp + (127 - 15)) << 23) | (mant << 13);
  } else if (mant == 0) {  // +-0
    bits = sign;
  } else {  // subnormal: renormalise
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3FFu) << 13);
  }
  return BitsToF32(bits);
}

// float8_e4m3fn -> float32 bits, branch-free (vectorizes in loops): a normal
// code's float bits are (code & 0x7F) << 20 plus the exponent rebias
// (127 - 7) << 23; subnormals (exponent 0) are m * 2^-9; 0x7F is NaN; the
// sign moves to bit 31. dtype.cc checks all 256 codes at compile time against
// an independent construction; the tests check them against ml_dtypes.
constexpr uint32_t Fp8E4M3Bits(uint8_t code) {
  const uint32_t c = code;
  const uint32_t v = c & 0x7Fu;
  const uint32_t normal = (v << 20) + (120u << 23);
  const uint32_t sub = std::bit_cast<uint32_t>(static_cast<float>(static_cast<int32_t>(v)) * 0.001953125f);
  const uint32_t is_sub = 0u - static_cast<uint32_t>(v < 8);
  const uint32_t is_nan = 0u - static_cast<uint32_t>(v == 0x7Fu);
  uint32_t bits = (sub & is_sub) | (normal & ~is_sub);
  bits = (0x7FC00000u & is_nan) | (bits & ~is_nan);
  return bits | ((c & 0x80u) << 24);
}
// Inline on purpose: no out-of-line symbol (common/model once defined its own
// moe::Fp8E4M3ToF32; an inline definition cannot collide at link time).
inline float Fp8E4M3ToF32(uint8_t code) { return std::bit_cast<float>(Fp8E4M3Bits(code)); }

// float32 -> bfloat16, round to nearest even; NaN -> quiet NaN of same sign.
inline uint16_t F32ToBf16(float f) {
  const uint32_t bits = F32ToBits(f);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

// ---- bulk decode ---------------------------------------------------------------

// Widens `n` little-endian elements of `dtype` at `src` (any alignment) to
// float32. I32/I64/F64 values are converted with the usual C++ rounding
// (exact for |v| < 2^24). BOOL decodes to 0/1 (any non-zero byte is 1).
void DecodeToF32(DType dtype, const void* src, int64_t n, float* dst);

}  // namespace moe
