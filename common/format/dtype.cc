#include "common/format/dtype.h"

#include <array>
#include <bit>

namespace moe {
namespace {

struct DTypeRow {
  DType dtype;
  std::string_view name;
  int size;
  bool is_float;
};

constexpr DTypeRow kDTypes[kNumDTypes] = {
    {DType::kF32, "F32", 4, true},     {DType::kF16, "F16", 2, true},
    {DType::kBF16, "BF16", 2, true},   {DType::kF8E4M3, "F8_E4M3", 1, true},
    {DType::kI8, "I8", 1, false},      {DType::kU8, "U8", 1, false},
    {DType::kI32, "I32", 4, false},    {DType::kI64, "I64", 8, false},
    {DType::kBool, "BOOL", 1, false},  {DType::kF64, "F64", 8, true},
};

constexpr bool TableInEnumOrder() {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (static_cast<int>(kDTypes[i].dtype) != i) return false;
  }
  return true;
}
static_assert(TableInEnumOrder());

// float8_e4m3fn: s eeee mmm, bias 7. e == 0: subnormal m/8 * 2^-6.
// e == 15 && m == 7: NaN. No infinities. Built with exact float arithmetic
// (every value is a small power-of-two multiple).
constexpr float Fp8Value(uint8_t code) {
  const bool neg = (code & 0x80) != 0;
  const int e = (code >> 3) & 0xF;
  const int m = code & 0x7;
  if (e == 15 && m == 7) return 0.0f;  // patched to NaN in the table below
  float v;
  if (e == 0) {
    v = static_cast<float>(m) / 8.0f / 64.0f;  // m/8 * 2^-6
  } else {
    v = 1.0f + static_cast<float>(m) / 8.0f;
    int p = e - 7;
    while (p > 0) {
      v *= 2.0f;
      --p;
    }
    while (p < 0) {
      v /= 2.0f;
      ++p;
    }
  }
  return neg ? -v : v;
}

struct Fp8Table {
  std::array<uint32_t, 256> bits{};
  constexpr Fp8Table() {
    for (int c = 0; c < 256; ++c) {
      const uint8_t code = static_cast<uint8_t>(c);
      if ((code & 0x7F) == 0x7F) {
        bits[c] = (code & 0x80 ? 0xFFC00000u : 0x7FC00000u);  // quiet NaN with sign
      } else {
        bits[c] = std::bit_cast<uint32_t>(Fp8Value(code));
      }
    }
  }
};

constexpr Fp8Table kFp8Table;
static_assert(kFp8Table.bits[0x00] == 0x00000000u);
static_assert(kFp8Table.bits[0x80] == 0x80000000u);
static_assert(kFp8Table.bits[0x7E] == std::bit_cast<uint32_t>(448.0f));
static_assert(kFp8Table.bits[0x01] == std::bit_cast<uint32_t>(0.001953125f));  // 2^-9

// The branch-free decoder in dtype.h agrees with this construction on every code.
constexpr bool Fp8ArithmeticMatchesTable() {
  for (int c = 0; c < 256; ++c) {
    if (Fp8E4M3Bits(static_cast<uint8_t>(c)) != kFp8Table.bits[c]) return false;
  }
  return true;
}
static_assert(Fp8ArithmeticMatchesTable());

template <typename T>
inline T LoadLE(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

std::string_view DTypeName(DType d) {
  const int i = static_cast<int>(d);
  return (i >= 0 && i < kNumDTypes) ? kDTypes[i].name : std::string_view("?");
}

std::optional<DType> DTypeFromName(std::string_view name) {
  for (const auto& row : kDTypes) {
    if (row.name == name) return row.dtype;
  }
  return std::nullopt;
}

int DTypeSize(DType d) {
  const int i = static_cast<int>(d);
  return (i >= 0 && i < kNumDTypes) ? kDTypes[i].size : 0;
}

bool DTypeIsFloat(DType d) {
  const int i = static_cast<int>(d);
  return i >= 0 && i < kNumDTypes && kDTypes[i].is_float;
}

void DecodeToF32(DType dtype, const void* src_void, int64_t n, float* dst) {
  const uint8_t* src = static_cast<const uint8_t*>(src_void);
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16:
      // Branch-free (vectorizes); bit-identical to F16ToF32 for all codes.
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t h = LoadLE<uint16_t>(src + 2 * i);
        const uint32_t v = h & 0x7FFFu;
        const uint32_t normal = (v << 13) + (112u << 23);
        const uint32_t sub = F32ToBits(static_cast<float>(static_cast<int32_t>(v)) * 5.9604644775390625e-8f);  // 2^-24
        const uint32_t infnan = (v << 13) | 0x7F800000u;
        const uint32_t is_sub = 0u - static_cast<uint32_t>(v < 0x400u);
        const uint32_t is_inf = 0u - static_cast<uint32_t>(v >= 0x7C00u);
        uint32_t bits = (sub & is_sub) | (normal & ~is_sub);
        bits = (infnan & is_inf) | (bits & ~is_inf);
        dst[i] = BitsToF32(bits | ((h & 0x8000u) << 16));
      }
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToF32(LoadLE<uint16_t>(src + 2 * i));
      return;
    case DType::kF8E4M3:
      for (int64_t i = 0; i < n; ++i) dst[i] = Fp8E4M3ToF32(src[i]);
      return;
    case DType::kI8:
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(static_cast<int8_t>(src[i]));
      return;
    case DType::kU8:
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
      return;
    case DType::kI32:
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(LoadLE<int32_t>(src + 4 * i));
      return;
    case DType::kI64:
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(LoadLE<int64_t>(src + 8 * i));
      return;
    case DType::kBool:
      for (int64_t i = 0; i < n; ++i) dst[i] = src[i] != 0 ? 1.0f : 0.0f;
      return;
    case DType::kF64:
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(LoadLE<double>(src + 8 * i));
      return;
  }
}

}  // namespace moe
