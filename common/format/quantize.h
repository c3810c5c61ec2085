// Quantizers and dequantizers for every QFormat (common/format/qformat.h is
// the spec; tools/format/quant_ref.py is the NumPy reference that produces
// the same bytes, checked by tests/format/quantize_test.cc).
//
// Problem in numbers: GLM-5 has ~744e9 weights; `moe convert` quantizes all
// of them once. At 1 GB/s of input per core the quantizer is well below disk
// speed only if it stays branch-free and vectorizable: one pass for absmax,
// one pass for w / scale (float32 division, as the spec says), rounding with
// the 1.5 * 2^23 trick (exact round-half-to-even for |x| < 2^22; here
// |w / scale| <= qmax + 1 ulp by construction), clamp, pack.
//
// Contract:
//   - Integer formats reject non-finite inputs (InvalidArgument naming the
//     row and column): absmax of a row with inf/NaN has no meaningful scale.
//   - f32 / bf16 store any value (bf16 rounds to nearest even, NaN stays a
//     quiet NaN with its sign).
//   - Padding elements (odd widths in q4, widths not divisible by 4 in q2)
//     are stored as q = 0, i.e. the code for 0 (8 resp. 2).
//   - Matrix functions parallelize over rows with OpenMP; results do not
//     depend on the thread count.
// Thread safety: all functions are pure (no shared state).
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "common/format/qformat.h"

namespace moe {

// float32 -> bfloat16 bits, round to nearest even; NaN -> quiet NaN.
uint16_t F32ToBF16(float v);
float BF16ToF32(uint16_t b);

// Quantizes one row of `cols` floats into RowBytes(f, cols) bytes at `data`
// and GroupsPerRow(f, cols) scales at `scales` (unused for f32/bf16).
// Returns false (and leaves the outputs unspecified) if an integer format
// meets a non-finite value; *bad_col receives its column.
bool QuantizeRow(QFormat f, const float* w, int64_t cols, uint8_t* data, float* scales,
                 int64_t* bad_col);

// Dequantizes one stored row into `cols` floats.
void DequantizeRow(QFormat f, const uint8_t* data, const float* scales, int64_t cols, float* out);

// Quantizes a row-major [rows, cols] matrix (row stride = cols floats) into
// DataBytes(f, rows, cols) bytes and ScaleBytes(f, rows, cols) bytes of
// float32 scales. `what` names the tensor in errors.
absl::Status QuantizeMatrix(QFormat f, const float* w, int64_t rows, int64_t cols, uint8_t* data,
                            float* scales, std::string_view what = "matrix");

// Dequantizes a whole stored matrix into rows * cols floats.
void DequantizeMatrix(QFormat f, const uint8_t* data, const float* scales, int64_t rows,
                      int64_t cols, float* out);

}  // namespace moe
