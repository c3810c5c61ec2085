#include "common/format/quantize.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/base/sanitizer.h"

namespace moe {
namespace {

inline uint32_t Bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}
inline float FromBits(uint32_t u) {
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

// Round half to even for |x| < 2^22 (the sum lands in [2^23, 2^24) where the
// float spacing is 1, so the addition itself rounds to nearest even).
inline float RoundHalfEven(float x) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return (x + kMagic) - kMagic;
}

// Codes for w[0..n) with one scale; writes codes into q. The loop is plain so
// GCC vectorizes it with SSE2.
inline void Codes(const float* w, int64_t n, float scale, int qmax, int8_t* q) {
  const float lo = static_cast<float>(-qmax - 1);
  const float hi = static_cast<float>(qmax);
  for (int64_t i = 0; i < n; ++i) {
    float r = RoundHalfEven(w[i] / scale);
    r = r < lo ? lo : r;
    r = r > hi ? hi : r;
    q[i] = static_cast<int8_t>(static_cast<int>(r));
  }
}

// Largest |w| as raw bits (non-negative floats order like integers; inf and
// NaN compare above every finite value).
inline uint32_t AbsMaxBits(const float* w, int64_t n) {
  uint32_t m = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t a;
    std::memcpy(&a, w + i, 4);
    a &= 0x7fffffffu;
    m = a > m ? a : m;
  }
  return m;
}

void PackRow(QFormat f, const int8_t* q, int64_t cols, uint8_t* data) {
  switch (Info(f).bits) {
    case 8:
      std::memcpy(data, q, static_cast<size_t>(cols));
      return;
    case 4: {
      const int64_t full = cols / 2;
      for (int64_t j = 0; j < full; ++j) {
        data[j] = static_cast<uint8_t>((q[2 * j] + 8) | ((q[2 * j + 1] + 8) << 4));
      }
      if (cols & 1) data[full] = static_cast<uint8_t>((q[cols - 1] + 8) | (8 << 4));
      return;
    }
    case 2: {
      const int64_t full = cols / 4;
      for (int64_t j = 0; j < full; ++j) {
        const int8_t* p = q + 4 * j;
        data[j] = static_cast<uint8_t>((p[0] + 2) | ((p[1] + 2) << 2) | ((p[2] + 2) << 4) |
                                       ((p[3] + 2) << 6));
      }
      if (cols % 4 != 0) {
        uint8_t b = 0;
        for (int k = 0; k < 4; ++k) {
          const int64_t i = 4 * full + k;
          const int code = i < cols ? q[i] + 2 : 2;
          b = static_cast<uint8_t>(b | (code << (2 * k)));
        }
        data[full] = b;
      }
      return;
    }
    default:
      return;
  }
}

// codes: scratch of at least `cols` bytes. Cloned for AVX2 (same IEEE
// operations, so the bytes do not depend on the clone chosen).
#if defined(__x86_64__) && !MOE_ASAN
__attribute__((target_clones("avx2", "default")))
#endif
bool QuantizeRowImpl(QFormat f, const float* w, int64_t cols, uint8_t* data, float* scales,
                     int64_t* bad_col, int8_t* codes) {
  const QFormatInfo& info = Info(f);
  if (f == QFormat::kF32) {
    std::memcpy(data, w, static_cast<size_t>(cols) * 4);
    return true;
  }
  if (f == QFormat::kBF16) {
    for (int64_t i = 0; i < cols; ++i) {
      const uint16_t b = F32ToBF16(w[i]);
      std::memcpy(data + 2 * i, &b, 2);
    }
    return true;
  }
  const int64_t g = GroupSize(f, cols);
  const int64_t ng = GroupsPerRow(f, cols);
  const float qmax = static_cast<float>(info.qmax);
  for (int64_t k = 0; k < ng; ++k) {
    const int64_t begin = k * g;
    const int64_t n = std::min(g, cols - begin);
    const uint32_t mb = AbsMaxBits(w + begin, n);
    if (mb >= 0x7f800000u) {
      for (int64_t i = begin; i < begin + n; ++i) {
        if (!std::isfinite(w[i])) {
          if (bad_col) *bad_col = i;
          return false;
        }
      }
    }
    const float scale = std::max(FromBits(mb) / qmax, 1e-8f);
    scales[k] = scale;
    Codes(w + begin, n, scale, info.qmax, codes + begin);
  }
  PackRow(f, codes, cols, data);
  return true;
}

}  // namespace

uint16_t F32ToBF16(float v) {
  const uint32_t u = Bits(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float BF16ToF32(uint16_t b) { return FromBits(static_cast<uint32_t>(b) << 16); }

bool QuantizeRow(QFormat f, const float* w, int64_t cols, uint8_t* data, float* scales,
                 int64_t* bad_col) {
  std::vector<int8_t> codes(static_cast<size_t>(cols) + 4);
  return QuantizeRowImpl(f, w, cols, data, scales, bad_col, codes.data());
}

namespace {

#if defined(__x86_64__) && !MOE_ASAN
#define MOE_DEQUANT_CLONES __attribute__((target_clones("avx512f", "avx2", "default"), noinline))
#else
#define MOE_DEQUANT_CLONES
#endif

typedef uint8_t U8x16 __attribute__((vector_size(16)));
typedef int32_t I32x16 __attribute__((vector_size(64)));
typedef float F32x16 __attribute__((vector_size(64)));

// The int8 and int4 loops are cloned (the absorbed MLA path dequantizes
// GLM-5's kv_b rows every step: 14.7 M values a layer) and noinline (g++
// inlines the default clone of a target_clones function into a caller in the
// same file, so the wide clones never ran). An exact conversion and one
// product per code: the same bits on every clone.
MOE_DEQUANT_CLONES
void DequantizeInt8(const int8_t* q, const float* scales, int64_t group, int64_t n, float* out) {
  for (int64_t g0 = 0, k = 0; g0 < n; g0 += group, ++k) {
    const int64_t g1 = std::min(n, g0 + group);
    const float sc = scales[k];
    for (int64_t i = g0; i < g1; ++i) out[i] = static_cast<float>(q[i]) * sc;
  }
}

// 16 bytes (32 codes, low nibble first) at a time: the low and the high
// nibbles widened and scaled as two vectors, then interleaved into code order
// (a loop per code, or interleaving the bytes first, compiled to scalar
// inserts: 10x slower on GLM-5's kv_b rows).
MOE_DEQUANT_CLONES
void DequantizeInt4(const uint8_t* data, const float* scales, int64_t group, int64_t n, float* out) {
  for (int64_t g0 = 0, k = 0; g0 < n; g0 += group, ++k) {
    const int64_t g1 = std::min(n, g0 + group);
    const float sc = scales[k];
    int64_t i = g0;
    if ((i & 1) == 0) {
      for (; i + 32 <= g1; i += 32) {
        U8x16 b;
        __builtin_memcpy(&b, data + i / 2, sizeof b);
        // Codes i, i+2, ... (low nibbles) and i+1, i+3, ... (high), scaled, then interleaved.
        const F32x16 lo = __builtin_convertvector(__builtin_convertvector(b & 0xf, I32x16) - 8, F32x16) * sc;
        const F32x16 hi = __builtin_convertvector(__builtin_convertvector(b >> 4, I32x16) - 8, F32x16) * sc;
        const F32x16 f0 = __builtin_shufflevector(lo, hi, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
        const F32x16 f1 = __builtin_shufflevector(lo, hi, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
        __builtin_memcpy(out + i, &f0, sizeof f0);
        __builtin_memcpy(out + i + 16, &f1, sizeof f1);
      }
    }
    for (; i < g1; ++i) out[i] = static_cast<float>(((data[i / 2] >> (4 * (i & 1))) & 0xf) - 8) * sc;
  }
}

}  // namespace

void DequantizeRow(QFormat f, const uint8_t* data, const float* scales, int64_t cols, float* out) {
  const QFormatInfo& info = Info(f);
  if (f == QFormat::kF32) {
    std::memcpy(out, data, static_cast<size_t>(cols) * 4);
    return;
  }
  if (f == QFormat::kBF16) {
    for (int64_t i = 0; i < cols; ++i) {
      uint16_t b;
      std::memcpy(&b, data + 2 * i, 2);
      out[i] = BF16ToF32(b);
    }
    return;
  }
  const int64_t g = GroupSize(f, cols);
  switch (info.bits) {
    case 8:
      return DequantizeInt8(reinterpret_cast<const int8_t*>(data), scales, g, cols, out);
    case 4:
      return DequantizeInt4(data, scales, g, cols, out);
    default:
      for (int64_t g0 = 0; g0 < cols; g0 += g) {
        const int64_t g1 = std::min(cols, g0 + g);
        const float sc = scales[g0 / g];
        for (int64_t i = g0; i < g1; ++i) out[i] = static_cast<float>(((data[i / 4] >> (2 * (i & 3))) & 0x3) - 2) * sc;
      }
  }
}

absl::Status QuantizeMatrix(QFormat f, const float* w, int64_t rows, int64_t cols, uint8_t* data,
                            float* scales, std::string_view what) {
  if (rows < 0 || cols <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(AV(what), ": bad matrix shape [", rows, ", ", cols, "]"));
  }
  const int64_t rb = RowBytes(f, cols);
  const int64_t ng = GroupsPerRow(f, cols);
  std::atomic<int64_t> bad_row{-1};
  std::atomic<int64_t> bad_col{-1};
#pragma omp parallel if (rows * cols >= (1 << 18))
  {
    std::vector<int8_t> codes(static_cast<size_t>(cols) + 4);
#pragma omp for schedule(dynamic, 8)
    for (int64_t r = 0; r < rows; ++r) {
      int64_t col = -1;
      if (!QuantizeRowImpl(f, w + r * cols, cols, data + r * rb, scales + r * ng, &col,
                           codes.data())) {
        int64_t expected = -1;
        if (bad_row.compare_exchange_strong(expected, r)) bad_col.store(col);
      }
    }
  }
  if (bad_row.load() >= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        AV(what), ": non-finite value at row ", bad_row.load(), ", column ", bad_col.load(),
        " cannot be quantized to ", AV(Name(f))));
  }
  return absl::OkStatus();
}

void DequantizeMatrix(QFormat f, const uint8_t* data, const float* scales, int64_t rows,
                      int64_t cols, float* out) {
  const int64_t rb = RowBytes(f, cols);
  const int64_t ng = GroupsPerRow(f, cols);
#pragma omp parallel for schedule(dynamic, 8) if (rows * cols >= (1 << 18))
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeRow(f, data + r * rb, scales + r * ng, cols, out + r * cols);
  }
}

}  // namespace moe
