// Fused forms (gate+up+SwiGLU, weighted down accumulate) and the MLA row
// products, checked against compositions of plain Matmul calls.
#include <cmath>
#include <cstring>
#include <vector>

#include "common/kernels/kernels.h"
#include "gtest/gtest.h"
#include "tests/kernels/test_quant.h"

namespace moe::kernels {
namespace {

using testing::OwnedMatrix;
using testing::Quantize;
using testing::RandomVector;

std::vector<Isa> TestIsas() {
  std::vector<Isa> v;
  for (Isa i : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    if (IsaSupported(i)) v.push_back(i);
  return v;
}

std::unique_ptr<Kernels> Make(Isa isa, int threads) {
  KernelConfig c;
  c.isa = isa;
  c.threads = threads;
  return std::move(Kernels::Create(c)).value();
}

TEST(KernelsFusedTest, GateUpSwiGLUEqualsSeparateMatmuls) {
  const int64_t O = 37, I = 300, S = 5;
  for (QFormat f : {QFormat::kQ4G32, QFormat::kQ8G128, QFormat::kQ4Row, QFormat::kBF16}) {
    const OwnedMatrix g = Quantize(f, O, I, RandomVector(O * I, 1));
    const OwnedMatrix u = Quantize(f, O, I, RandomVector(O * I, 2));
    const auto x = RandomVector(S * I, 3, -2.0f, 2.0f);
    for (Isa isa : TestIsas()) {
      auto k = Make(isa, 2);
      std::vector<float> h(S * O + 1, -7.0f), gy(S * O), uy(S * O);
      ASSERT_TRUE(k->GateUpSwiGLU(g.view(), u.view(), x.data(), S, h.data()).ok());
      ASSERT_TRUE(k->Matmul(g.view(), x.data(), S, gy.data()).ok());
      ASSERT_TRUE(k->Matmul(u.view(), x.data(), S, uy.data()).ok());
      for (int64_t i = 0; i < S * O; ++i) {
        const float want = gy[i] / (1.0f + std::exp(-gy[i])) * uy[i];
        EXPECT_NEAR(h[i], want, 1e-6f * std::fabs(want) + 1e-30f) << Name(f) << " " << IsaName(isa);
      }
      EXPECT_EQ(h[S * O], -7.0f) << "overrun";
    }
  }
  auto k = Make(Isa::kScalar, 1);
  const OwnedMatrix a = Quantize(QFormat::kQ4G32, 4, 64, RandomVector(256, 1));
  const OwnedMatrix b = Quantize(QFormat::kQ4G64, 4, 64, RandomVector(256, 1));
  std::vector<float> x(64), h(4);
  EXPECT_EQ(k->GateUpSwiGLU(a.view(), b.view(), x.data(), 1, h.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(KernelsFusedTest, DownAccumulateAddsWeightedProduct) {
  const int64_t O = 29, I = 256, S = 3;
  for (QFormat f : {QFormat::kQ4G64, QFormat::kQ8Row, QFormat::kQ2Row, QFormat::kF32}) {
    const OwnedMatrix d = Quantize(f, O, I, RandomVector(O * I, 4));
    const auto h = RandomVector(S * I, 5);
    const std::vector<float> weight = {0.25f, -1.5f, 0.0f};
    for (Isa isa : TestIsas()) {
      auto k = Make(isa, 2);
      const auto y0 = RandomVector(S * O, 6);
      auto y = y0;
      std::vector<float> p(S * O);
      ASSERT_TRUE(k->DownAccumulate(d.view(), h.data(), S, weight.data(), y.data()).ok());
      ASSERT_TRUE(k->Matmul(d.view(), h.data(), S, p.data()).ok());
      for (int64_t s = 0; s < S; ++s)
        for (int64_t o = 0; o < O; ++o) {
          const float t = weight[s] * p[s * O + o];
          EXPECT_EQ(y[s * O + o], y0[s * O + o] + t) << Name(f) << " " << IsaName(isa);
        }
    }
  }
}

TEST(KernelsMlaTest, MatmulRowsIsASliceOfTheFullProduct) {
  const int64_t O = 40, I = 512, S = 2;
  for (QFormat f : {QFormat::kQ8G64, QFormat::kQ4G128, QFormat::kBF16}) {
    const OwnedMatrix m = Quantize(f, O, I, RandomVector(O * I, 7));
    const auto x = RandomVector(S * I, 8);
    for (Isa isa : TestIsas()) {
      auto k = Make(isa, 2);
      std::vector<float> full(S * O), part(S * 5);
      ASSERT_TRUE(k->Matmul(m.view(), x.data(), S, full.data()).ok());
      ASSERT_TRUE(k->MatmulRows(m.view(), 17, 22, x.data(), S, part.data()).ok());
      for (int64_t s = 0; s < S; ++s)
        EXPECT_EQ(std::memcmp(&part[s * 5], &full[s * O + 17], 5 * sizeof(float)), 0) << Name(f);
    }
  }
}

TEST(KernelsMlaTest, VecTimesRowsMatchesDoubleReference) {
  const int64_t O = 30, I = 131, S = 2, r0 = 7, r1 = 19;
  for (QFormat f : {QFormat::kQ8G32, QFormat::kQ4Row, QFormat::kF32}) {
    const OwnedMatrix m = Quantize(f, O, I, RandomVector(O * I, 9));
    const auto v = RandomVector(S * (r1 - r0), 10);
    for (Isa isa : TestIsas()) {
      auto k = Make(isa, 1);
      std::vector<float> out(S * I + 1, 3.0f);
      ASSERT_TRUE(k->VecTimesRows(m.view(), r0, r1, v.data(), S, out.data()).ok());
      for (int64_t s = 0; s < S; ++s)
        for (int64_t c = 0; c < I; ++c) {
          double ref = 0, aref = 0;
          for (int64_t r = r0; r < r1; ++r) {
            ref += v[s * (r1 - r0) + r - r0] * testing::Dequant(m, r, c);
            aref += std::fabs(v[s * (r1 - r0) + r - r0] * testing::Dequant(m, r, c));
          }
          EXPECT_NEAR(out[s * I + c], ref, kFloatRelTol * aref + 1e-30) << Name(f);
        }
      EXPECT_EQ(out[S * I], 3.0f);
    }
  }
}

// Column chunks run in parallel: 1 and 2 threads give the same bits.
TEST(KernelsMlaTest, VecTimesRowsThreadCountInvariant) {
  const int64_t O = 40, I = 1537, S = 3, r0 = 3, r1 = 37;
  for (QFormat f : {QFormat::kQ4G64, QFormat::kQ8Row, QFormat::kBF16}) {
    const OwnedMatrix m = Quantize(f, O, I, RandomVector(O * I, 21));
    const auto v = RandomVector(S * (r1 - r0), 22);
    std::vector<float> a(S * I, 1.0f), b(S * I, 2.0f);
    ASSERT_TRUE(Make(Isa::kScalar, 1)->VecTimesRows(m.view(), r0, r1, v.data(), S, a.data()).ok());
    ASSERT_TRUE(Make(Isa::kScalar, 2)->VecTimesRows(m.view(), r0, r1, v.data(), S, b.data()).ok());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << Name(f);
  }
}

}  // namespace
}  // namespace moe::kernels
