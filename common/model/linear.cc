#include "common/model/linear.h"

#include <algorithm>
#include <vector>

#include "common/format/quantize.h"
#include "common/model/bf16.h"
#include "common/base/sanitizer.h"

namespace moe {

void SerialFor(int64_t n, absl::FunctionRef<void(int64_t)> body) {
  for (int64_t i = 0; i < n; ++i) body(i);
}

void DequantRow(const WeightMatrix& w, int64_t r, float* out) {
  const int64_t n = w.cols;
  const uint8_t* row = w.data + r * RowBytes(w.format, n);
  switch (w.format) {
    case QFormat::kF32:
      std::memcpy(out, row, n * 4);
      return;
    case QFormat::kBF16: {
      const uint16_t* p = reinterpret_cast<const uint16_t*>(row);
      for (int64_t i = 0; i < n; ++i) out[i] = BF16BitsToF32(p[i]);
      return;
    }
    default:
      break;
  }
  DequantizeRow(w.format, row, w.scales + r * GroupsPerRow(w.format, n), n, out);
}

void Linear(const WeightMatrix& w, const float* x, int64_t s, float* y, ParallelFor par) {
  const int64_t O = w.rows, I = w.cols;
  // Blocks of output rows, a dequantized row buffer per block. Small
  // products stay on the caller (a hand-off costs more than they do).
  const int64_t block = O * I * s > (1 << 18) ? std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(1, I * s)) : O;
  const int64_t nblocks = (O + block - 1) / block;
  auto run = [&](int64_t b) {
    std::vector<float> row(I);
    for (int64_t o = b * block, end = std::min(O, o + block); o < end; ++o) {
      DequantRow(w, o, row.data());
      for (int64_t t = 0; t < s; ++t) y[t * O + o] = DotF32(x + t * I, row.data(), I);
    }
  };
  if (nblocks == 1) {
    run(0);
  } else {
    par(nblocks, run);
  }
}

#if defined(__x86_64__) && !MOE_ASAN
#define MOE_CLONE_AVX2 __attribute__((target_clones("avx2", "default")))
#else
#define MOE_CLONE_AVX2
#endif

// Eight f32 lanes as one value (GCC vector extension): accumulators stay in
// registers (g++ kept an array of 8 floats on the stack); lane k holds DotF32's acc[k].
typedef float F32x8 __attribute__((vector_size(32)));

MOE_CLONE_AVX2
void DotF32Many(const float* a, int64_t lda, int64_t m, const float* b, int64_t n, float* out) {
  int64_t j = 0;
  for (; j + 4 <= m; j += 4) {  // four independent accumulator sets
    const float* a0 = a + j * lda;
    F32x8 s0 = {}, s1 = {}, s2 = {}, s3 = {};  // named: an array of them was kept on the stack
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      F32x8 bv, x0, x1, x2, x3;
      __builtin_memcpy(&bv, b + i, sizeof bv);
      __builtin_memcpy(&x0, a0 + i, sizeof bv);
      __builtin_memcpy(&x1, a0 + lda + i, sizeof bv);
      __builtin_memcpy(&x2, a0 + 2 * lda + i, sizeof bv);
      __builtin_memcpy(&x3, a0 + 3 * lda + i, sizeof bv);
      s0 += x0 * bv;
      s1 += x1 * bv;
      s2 += x2 * bv;
      s3 += x3 * bv;
    }
    const F32x8* sums[4] = {&s0, &s1, &s2, &s3};
    for (int q = 0; q < 4; ++q) {
      float c[8];
      __builtin_memcpy(c, sums[q], sizeof c);
      for (int64_t t = i, k = 0; t < n; ++t, ++k) c[k] += a0[q * lda + t] * b[t];
      out[j + q] = ((c[0] + c[1]) + (c[2] + c[3])) + ((c[4] + c[5]) + (c[6] + c[7]));
    }
  }
  for (; j < m; ++j) out[j] = DotF32(a + j * lda, b, n);
}

MOE_CLONE_AVX2
void AxpyF32(float a, const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace moe
