// Test-only quantizer following the recipe in common/format/qformat.h, and a
// double-precision reference matmul. Independent of moe_format on purpose.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/format/qformat.h"
#include "common/kernels/kernels.h"

namespace moe::kernels::testing {

struct OwnedMatrix {
  QFormat format = QFormat::kF32;
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> data;
  std::vector<float> scales;
  QMatrix view() const {
    return QMatrix{format, rows, cols, data.data(), scales.empty() ? nullptr : scales.data()};
  }
};

inline std::vector<float> RandomVector(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = lo + (hi - lo) * static_cast<float>(rng() >> 8) * (1.0f / 16777216.0f);
  return v;
}

// Stores code q (already clamped) of element i into a packed row.
inline void PutCode(QFormat f, uint8_t* row, int64_t i, int q) {
  const int bits = Info(f).bits;
  if (bits == 8) {
    row[i] = static_cast<uint8_t>(static_cast<int8_t>(q));
  } else if (bits == 4) {
    const int shift = 4 * (i % 2);
    row[i / 2] = static_cast<uint8_t>((row[i / 2] & ~(15 << shift)) | ((q + 8) << shift));
  } else {
    const int shift = 2 * (i % 4);
    row[i / 4] = static_cast<uint8_t>((row[i / 4] & ~(3 << shift)) | ((q + 2) << shift));
  }
}

// Quantizes w[rows][cols] (float) into format f.
inline OwnedMatrix Quantize(QFormat f, int64_t rows, int64_t cols, const std::vector<float>& w) {
  OwnedMatrix m;
  m.format = f;
  m.rows = rows;
  m.cols = cols;
  const int64_t rb = RowBytes(f, cols);
  m.data.assign(static_cast<size_t>(rows * rb), 0);
  const QFormatInfo& info = Info(f);
  if (!info.integer) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < cols; ++i) {
        const float v = w[r * cols + i];
        uint32_t u;
        std::memcpy(&u, &v, 4);
        if (info.bits == 32) {
          std::memcpy(&m.data[r * rb + 4 * i], &v, 4);
        } else {
          const uint16_t h = static_cast<uint16_t>(u >> 16);  // truncation is fine for tests
          std::memcpy(&m.data[r * rb + 2 * i], &h, 2);
        }
      }
    return m;
  }
  const int64_t gpr = GroupsPerRow(f, cols), gs = GroupSize(f, cols);
  m.scales.resize(static_cast<size_t>(rows * gpr));
  for (int64_t r = 0; r < rows; ++r) {
    // Pad codes are q = 0.
    for (int64_t i = 0; i < rb * 8 / info.bits; ++i) PutCode(f, &m.data[r * rb], i, 0);
    for (int64_t g = 0; g < gpr; ++g) {
      const int64_t e0 = g * gs, e1 = std::min(cols, e0 + gs);
      float amax = 0.0f;
      for (int64_t e = e0; e < e1; ++e) amax = std::max(amax, std::fabs(w[r * cols + e]));
      const float scale = std::max(amax / static_cast<float>(info.qmax), 1e-8f);
      m.scales[r * gpr + g] = scale;
      for (int64_t e = e0; e < e1; ++e) {
        const float q = std::nearbyint(w[r * cols + e] / scale);
        PutCode(f, &m.data[r * rb], e,
                static_cast<int>(std::clamp(q, -static_cast<float>(info.qmax) - 1.0f,
                                            static_cast<float>(info.qmax))));
      }
    }
  }
  return m;
}

// Element (r, i) of the stored matrix, dequantized, in double.
inline double Dequant(const OwnedMatrix& m, int64_t r, int64_t i) {
  const QFormatInfo& info = Info(m.format);
  const uint8_t* row = m.data.data() + r * RowBytes(m.format, m.cols);
  if (info.bits == 32) {
    float v;
    std::memcpy(&v, row + 4 * i, 4);
    return v;
  }
  if (info.bits == 16) {
    uint16_t h;
    std::memcpy(&h, row + 2 * i, 2);
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float v;
    std::memcpy(&v, &u, 4);
    return v;
  }
  int q;
  if (info.bits == 8) q = static_cast<int8_t>(row[i]);
  else if (info.bits == 4) q = ((row[i / 2] >> (4 * (i % 2))) & 15) - 8;
  else q = ((row[i / 4] >> (2 * (i % 4))) & 3) - 2;
  const int64_t gpr = GroupsPerRow(m.format, m.cols);
  const int64_t g = info.group == 0 ? 0 : i / info.group;
  return q * static_cast<double>(m.scales[r * gpr + g]);
}

// ref[s][o] = sum_i x[s][i] * W[o][i] in double; absref = sum |x w|.
inline void ReferenceMatmul(const OwnedMatrix& m, const std::vector<float>& x, int64_t s,
                            std::vector<double>* ref, std::vector<double>* absref) {
  ref->assign(static_cast<size_t>(s * m.rows), 0.0);
  absref->assign(static_cast<size_t>(s * m.rows), 0.0);
  for (int64_t o = 0; o < m.rows; ++o)
    for (int64_t i = 0; i < m.cols; ++i) {
      const double w = Dequant(m, o, i);
      for (int64_t r = 0; r < s; ++r) {
        (*ref)[r * m.rows + o] += w * x[r * m.cols + i];
        (*absref)[r * m.rows + o] += std::fabs(w * x[r * m.cols + i]);
      }
    }
}

}  // namespace moe::kernels::testing
