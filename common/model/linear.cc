#include "common/model/linear.h"

#include <algorithm>
#include <vector>

#include "common/format/quantize.h"
#include "common/base/sanitizer.h"

namespace moe {

void SerialFor(int64_t n, absl::FunctionRef<void(int64_t)> body) {
  for (int64_t i = 0; i < n; ++i) body(i);
}

#if defined(__x86_64__) && !MOE_ASAN
#define MOE_CLONE_WIDE __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MOE_CLONE_WIDE
#endif

void DequantRow(const WeightMatrix& w, int64_t r, float* out) {
  DequantizeRow(w.format, w.data + r * RowBytes(w.format, w.cols), w.scales + r * GroupsPerRow(w.format, w.cols), w.cols,
                out);
}

void Linear(const WeightMatrix& w, const float* x, int64_t s, float* y, ParallelFor par) {
  const int64_t O = w.rows, I = w.cols;
  // Blocks of output rows, a dequantized row buffer per block. Small
  // products stay on the caller (a hand-off costs more than they do).
  const int64_t block = O * I * s > (1 << 18) ? std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(1, I * s)) : O;
  const int64_t nblocks = (O + block - 1) / block;
  // The dots go through DotF32Many (the same bits as DotF32, vectorized):
  // f32 weights in place, others a dequantized group of 4 rows at a time.
  auto run = [&](int64_t b) {
    const int64_t o0 = b * block, o1 = std::min(O, o0 + block);
    if (w.format == QFormat::kF32) {
      const float* rows = reinterpret_cast<const float*>(w.data);
      for (int64_t t = 0; t < s; ++t) DotF32Many(rows + o0 * I, I, o1 - o0, x + t * I, I, y + t * O + o0);
      return;
    }
    std::vector<float> rows(4 * I);
    for (int64_t o = o0; o < o1; o += 4) {
      const int64_t m = std::min<int64_t>(4, o1 - o);
      for (int64_t j = 0; j < m; ++j) DequantRow(w, o + j, rows.data() + j * I);
      for (int64_t t = 0; t < s; ++t) DotF32Many(rows.data(), I, m, x + t * I, I, y + t * O + o);
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

// Sixteen f32 lanes, one per head: a zmm register on AVX-512, two ymm on AVX2.
typedef float F32x16 __attribute__((vector_size(64)));

namespace {
// Through a reference, not a return value: a 64-byte vector returned from a
// function compiled for the baseline ABI draws -Wpsabi notes.
inline void Load16(F32x16& v, const float* p) { __builtin_memcpy(&v, p, sizeof v); }
}  // namespace

// DotF32's eight partial sums (element i into sum i % 8), each a vector over
// the 16 heads; two keys per pass so each column of qT is loaded once for both.
MOE_CLONE_WIDE
void DotF32Heads16(const float* qT, const float* const* keys, int64_t nk, int64_t n, float* out) {
  int64_t k = 0;
  for (; k + 2 <= nk; k += 2) {
    const float* b0 = keys[k];
    const float* b1 = keys[k + 1];
    F32x16 a0 = {}, a1 = {}, a2 = {}, a3 = {}, a4 = {}, a5 = {}, a6 = {}, a7 = {};
    F32x16 c0 = {}, c1 = {}, c2 = {}, c3 = {}, c4 = {}, c5 = {}, c6 = {}, c7 = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const float* q = qT + i * kHeads16;
      F32x16 v;
      Load16(v, q + 0 * kHeads16), a0 += v * b0[i + 0], c0 += v * b1[i + 0];
      Load16(v, q + 1 * kHeads16), a1 += v * b0[i + 1], c1 += v * b1[i + 1];
      Load16(v, q + 2 * kHeads16), a2 += v * b0[i + 2], c2 += v * b1[i + 2];
      Load16(v, q + 3 * kHeads16), a3 += v * b0[i + 3], c3 += v * b1[i + 3];
      Load16(v, q + 4 * kHeads16), a4 += v * b0[i + 4], c4 += v * b1[i + 4];
      Load16(v, q + 5 * kHeads16), a5 += v * b0[i + 5], c5 += v * b1[i + 5];
      Load16(v, q + 6 * kHeads16), a6 += v * b0[i + 6], c6 += v * b1[i + 6];
      Load16(v, q + 7 * kHeads16), a7 += v * b0[i + 7], c7 += v * b1[i + 7];
    }
    F32x16* as[8] = {&a0, &a1, &a2, &a3, &a4, &a5, &a6, &a7};
    F32x16* cs[8] = {&c0, &c1, &c2, &c3, &c4, &c5, &c6, &c7};
    for (int t = 0; i < n; ++i, ++t) {
      F32x16 v;
      Load16(v, qT + i * kHeads16);
      *as[t] += v * b0[i];
      *cs[t] += v * b1[i];
    }
    const F32x16 r0 = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7));
    const F32x16 r1 = ((c0 + c1) + (c2 + c3)) + ((c4 + c5) + (c6 + c7));
    __builtin_memcpy(out + k * kHeads16, &r0, sizeof r0);
    __builtin_memcpy(out + (k + 1) * kHeads16, &r1, sizeof r1);
  }
  for (; k < nk; ++k) {
    const float* b0 = keys[k];
    F32x16 a[8] = {};
    int64_t i = 0;
    for (int t = 0; i < n; ++i, t = (t + 1) & 7) {
      F32x16 v;
      Load16(v, qT + i * kHeads16);
      a[t] += v * b0[i];
    }
    const F32x16 r0 = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    __builtin_memcpy(out + k * kHeads16, &r0, sizeof r0);
  }
}

// Columns in blocks of 16: the 16 heads' sums of a block stay in registers
// across every key (one load of the key's block, 16 broadcasts of p).
MOE_CLONE_WIDE
void WeightedRowsHeads16(const float* p, const float* const* rows, int64_t nk, int64_t n, float* out) {
  int64_t c = 0;
  for (; c + 16 <= n; c += 16) {
    F32x16 y[kHeads16] = {};
    for (int64_t i = 0; i < nk; ++i) {
      F32x16 x;
      Load16(x, rows[i] + c);
      const float* pi = p + i * kHeads16;
      for (int64_t h = 0; h < kHeads16; ++h) y[h] += pi[h] * x;
    }
    for (int64_t h = 0; h < kHeads16; ++h) __builtin_memcpy(out + h * n + c, &y[h], sizeof y[h]);
  }
  for (; c < n; ++c) {
    float y[kHeads16] = {};
    for (int64_t i = 0; i < nk; ++i)
      for (int64_t h = 0; h < kHeads16; ++h) y[h] += p[i * kHeads16 + h] * rows[i][c];
    for (int64_t h = 0; h < kHeads16; ++h) out[h * n + c] = y[h];
  }
}

}  // namespace moe
