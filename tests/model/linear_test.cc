// The f32 helpers of the absorbed MLA path (common/model/linear.h) against
// plain loops, bit for bit: DotF32Many and DotF32Heads16 must equal DotF32
// per vector, AxpyF32 a product then a sum per element and
// WeightedRowsHeads16 a run of AxpyF32, whichever clone (AVX-512, AVX2 or
// baseline) this CPU runs, for every tail length; Linear the same bits on any
// ParallelFor. (DequantizeRow's codes: tests/format/quantize_test.cc.)
#include "common/model/linear.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "common/format/quantize.h"

namespace moe {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(LinearF32, DotF32ManyEqualsDotF32BitForBit) {
  for (int64_t n : {1, 7, 8, 9, 64, 100, 512}) {
    for (int64_t m : {1, 3, 4, 5, 16, 17}) {
      const int64_t lda = n + 3;  // rows not packed, as the heads of one row of q
      const auto a = Random(size_t(m * lda), uint32_t(n * 131 + m)), b = Random(size_t(n), uint32_t(n));
      std::vector<float> got(size_t(m), -1.0f);
      DotF32Many(a.data(), lda, m, b.data(), n, got.data());
      for (int64_t j = 0; j < m; ++j) {
        const float want = DotF32(a.data() + j * lda, b.data(), n);
        EXPECT_EQ(std::memcmp(&got[size_t(j)], &want, 4), 0) << "n " << n << " m " << m << " j " << j;
      }
    }
  }
}

TEST(LinearF32, AxpyF32IsAProductThenASum) {
  for (int64_t n : {1, 7, 8, 31, 512}) {
    const auto x = Random(size_t(n), 5), y0 = Random(size_t(n), 6);
    auto y = y0;
    const float a = 0.37f;
    AxpyF32(a, x.data(), n, y.data());
    for (int64_t i = 0; i < n; ++i) {
      volatile float prod = a * x[size_t(i)];  // rounded on its own: no fused multiply-add
      const float want = y0[size_t(i)] + prod;
      EXPECT_EQ(std::memcmp(&y[size_t(i)], &want, 4), 0) << "n " << n << " i " << i;
    }
  }
}

TEST(LinearF32, DotF32Heads16EqualsDotF32PerHead) {
  for (int64_t n : {1, 7, 8, 9, 64, 100, 512}) {
    for (int64_t nk : {1, 2, 3, 5}) {
      const auto qT = Random(size_t(n * kHeads16), uint32_t(n * 7 + nk));
      std::vector<std::vector<float>> keys;
      std::vector<const float*> kp;
      for (int64_t i = 0; i < nk; ++i) keys.push_back(Random(size_t(n), uint32_t(1000 + i)));
      for (const auto& k : keys) kp.push_back(k.data());
      std::vector<float> got(size_t(nk * kHeads16), -1.0f);
      DotF32Heads16(qT.data(), kp.data(), nk, n, got.data());
      for (int64_t h = 0; h < kHeads16; ++h) {
        std::vector<float> col(static_cast<size_t>(n));
        for (int64_t c = 0; c < n; ++c) col[size_t(c)] = qT[size_t(c * kHeads16 + h)];
        for (int64_t i = 0; i < nk; ++i) {
          const float want = DotF32(col.data(), keys[size_t(i)].data(), n);
          EXPECT_EQ(std::memcmp(&got[size_t(i * kHeads16 + h)], &want, 4), 0) << "n " << n << " nk " << nk;
        }
      }
    }
  }
}

TEST(LinearF32, WeightedRowsHeads16IsARunOfAxpyF32) {
  for (int64_t n : {1, 15, 16, 17, 64, 512}) {
    for (int64_t nk : {1, 3, 8}) {
      const auto p = Random(size_t(nk * kHeads16), uint32_t(n + nk));
      std::vector<std::vector<float>> rows;
      std::vector<const float*> rp;
      for (int64_t i = 0; i < nk; ++i) rows.push_back(Random(size_t(n), uint32_t(2000 + i)));
      for (const auto& r : rows) rp.push_back(r.data());
      std::vector<float> got(size_t(kHeads16 * n), -1.0f), want(size_t(kHeads16 * n), 0.0f);
      WeightedRowsHeads16(p.data(), rp.data(), nk, n, got.data());
      for (int64_t i = 0; i < nk; ++i)
        for (int64_t h = 0; h < kHeads16; ++h) AxpyF32(p[size_t(i * kHeads16 + h)], rp[size_t(i)], n, want.data() + h * n);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << "n " << n << " nk " << nk;
    }
  }
}

TEST(LinearF32, LinearGivesTheSameBitsOnAnyParallelFor) {
  for (QFormat f : {QFormat::kF32, QFormat::kQ8G128}) {
    const int64_t O = 300, I = 1024, S = 3;  // above the size a hand-off pays for: several blocks
    const auto w = Random(size_t(O * I), 11), x = Random(size_t(S * I), 12);
    std::vector<uint8_t> data(size_t(O * RowBytes(f, I)));
    std::vector<float> scales(size_t(O * GroupsPerRow(f, I)) + 1);
    if (f == QFormat::kF32) std::memcpy(data.data(), w.data(), data.size());
    else ASSERT_TRUE(QuantizeMatrix(f, w.data(), O, I, data.data(), scales.data(), "test").ok());
    const WeightMatrix m{f, O, I, data.data(), scales.data()};
    std::vector<float> serial(size_t(S * O)), reversed(size_t(S * O));
    Linear(m, x.data(), S, serial.data(), SerialFor);
    int64_t blocks = 0;
    Linear(m, x.data(), S, reversed.data(), [&](int64_t n, absl::FunctionRef<void(int64_t)> body) {
      blocks = n;
      for (int64_t i = n - 1; i >= 0; --i) body(i);
    });
    EXPECT_GT(blocks, 1);
    EXPECT_EQ(std::memcmp(serial.data(), reversed.data(), serial.size() * 4), 0) << Name(f);
  }
}

}  // namespace
}  // namespace moe
