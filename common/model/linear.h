// The engine's one matmul entry point: y[S, O] = x[S, I] . W^T for a stored
// matrix W[O, I] in any qformat.h format. Every projection of the forward
// pass goes through Linear() so the backing kernel is swapped in one place.
//
// Numerics contract: each output element is an f32 dot product accumulated
// in a fixed order that depends only on I (8 interleaved partial sums, then
// combined), never on S, the thread count or the row's position in the
// batch. Hence a row's result is bit-identical whether it is computed alone
// (decode, S = 1) or inside a batch (prefill / verify / scoring).
// Thread safety: pure; parallelises over output rows with the caller's
// ParallelFor (the model's one thread pool).
#pragma once

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "common/expert_source/expert_source.h"

namespace moe {

using WeightMatrix = ExpertMatrix;  // format, rows (O), cols (I), data, scales

// y (S x rows) = x (S x cols) . W^T.
// f32 dot product with a fixed 8-lane summation order (the same on every
// machine and compiler, so every caller sees bit-identical sums).
inline float DotF32(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  }
  for (int k = 0; i < n; ++i, ++k) acc[k] += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// Runs body(i) once for every i in [0, n), in any order, on any threads
// (Model::Parallel: the kernels' pool). No result may depend on how.
using ParallelFor = absl::FunctionRef<void(int64_t n, absl::FunctionRef<void(int64_t)> body)>;
// Runs them on the calling thread.
void SerialFor(int64_t n, absl::FunctionRef<void(int64_t)> body);

void Linear(const WeightMatrix& w, const float* x, int64_t s, float* y, ParallelFor par);

// out[j] = DotF32(a + j * lda, b, n) for j < m, the same bits as DotF32,
// several dots interleaved (the absorbed MLA path's scores and outputs: many
// heads against one latent). Cloned for AVX2 without FMA: the same IEEE
// operations in the same order, so the clone chosen never changes a bit.
void DotF32Many(const float* a, int64_t lda, int64_t m, const float* b, int64_t n, float* out);
// y[i] += a * x[i] (a product, then a sum: never fused). Cloned like DotF32Many.
void AxpyF32(float a, const float* x, int64_t n, float* y);

// Sixteen heads at once, for the absorbed MLA core (GLM-5: 64 heads in
// blocks of 16), in the same bits as the one-head functions above, on every
// clone (AVX-512, AVX2, baseline: the same IEEE operations in the same order,
// never fused):
//   kHeads16 = 16; qT is n x 16 (column h = head h's vector; pad unused heads).
inline constexpr int64_t kHeads16 = 16;
// out[i * 16 + h] = DotF32(head h of qT, keys[i], n) for i < nk.
void DotF32Heads16(const float* qT, const float* const* keys, int64_t nk, int64_t n, float* out);
// out[h * n + c] = sum over i < nk, in order, of p[i * 16 + h] * rows[i][c]
// (from 0: the same bits as filling out with 0 and calling
// AxpyF32(p[i * 16 + h], rows[i], n, out + h * n) for i = 0, 1, ...).
void WeightedRowsHeads16(const float* p, const float* const* rows, int64_t nk, int64_t n, float* out);

// Dequantizes row r of W into out[cols] (f32).
void DequantRow(const WeightMatrix& w, int64_t r, float* out);

}  // namespace moe
