#include "common/model/linear.h"

#include <vector>

#include "common/format/quantize.h"
#include "common/model/bf16.h"

namespace moe {
namespace {

}  // namespace

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

void Linear(const WeightMatrix& w, const float* x, int64_t s, float* y) {
  const int64_t O = w.rows, I = w.cols;
#pragma omp parallel if (O * I * s > (1 << 18))
  {
    std::vector<float> row(I);
#pragma omp for schedule(static)
    for (int64_t o = 0; o < O; ++o) {
      DequantRow(w, o, row.data());
      for (int64_t t = 0; t < s; ++t) y[t * O + o] = DotF32(x + t * I, row.data(), I);
    }
  }
}

}  // namespace moe
