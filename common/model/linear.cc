#include "common/model/linear.h"

#include <vector>

#include "common/format/quantize.h"
#include "common/model/bf16.h"

namespace moe {
namespace {

inline float Dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  }
  for (int k = 0; i < n; ++i, ++k) acc[k] += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

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
      for (int64_t t = 0; t < s; ++t) y[t * O + o] = Dot(x + t * I, row.data(), I);
    }
  }
}

}  // namespace moe
