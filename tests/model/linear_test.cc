// The f32 helpers of the absorbed MLA path (common/model/linear.h) against
// plain loops, bit for bit: DotF32Many must equal DotF32 per vector and
// AxpyF32 a product then a sum per element, whichever clone (AVX2 or
// baseline) this CPU runs, for every tail length.
#include "common/model/linear.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

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

}  // namespace
}  // namespace moe
