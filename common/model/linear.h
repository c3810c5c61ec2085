// The engine's one matmul entry point: y[S, O] = x[S, I] . W^T for a stored
// matrix W[O, I] in any qformat.h format. Every projection of the forward
// pass goes through Linear() so the backing kernel is swapped in one place.
//
// Numerics contract: each output element is an f32 dot product accumulated
// in a fixed order that depends only on I (8 interleaved partial sums, then
// combined), never on S, the thread count or the row's position in the
// batch. Hence a row's result is bit-identical whether it is computed alone
// (decode, S = 1) or inside a batch (prefill / verify / scoring).
// Thread safety: pure; parallelises over output rows with OpenMP.
#pragma once

#include <cstdint>

#include "common/model/expert_source.h"

namespace moe {

using WeightMatrix = ExpertMatrix;  // format, rows (O), cols (I), data, scales

// y (S x rows) = x (S x cols) . W^T.
void Linear(const WeightMatrix& w, const float* x, int64_t s, float* y);

// Dequantizes row r of W into out[cols] (f32).
void DequantRow(const WeightMatrix& w, int64_t r, float* out);

}  // namespace moe
