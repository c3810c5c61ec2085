// One harness over (format, ISA, path, shape, S), test-backend-ops style:
// every SIMD variant against the scalar reference (IDOT: bit-identical;
// float: within kFloatRelTol of a double reference), guard values after every
// output buffer, batch invariance and thread-count invariance.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/kernels/kernels.h"
#include "gtest/gtest.h"
#include "tests/kernels/test_quant.h"

namespace moe::kernels {
namespace {

using testing::OwnedMatrix;
using testing::Quantize;
using testing::RandomVector;

constexpr int kGuard = 67;
constexpr uint32_t kGuardBits = 0x7fc0dead;  // a NaN no kernel produces

std::vector<Isa> TestIsas() {
  std::vector<Isa> v;
  for (Isa i : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    if (IsaSupported(i)) v.push_back(i);
  return v;
}

std::vector<QFormat> IntegerFormats() {
  std::vector<QFormat> v;
  for (const auto& i : kQFormatTable)
    if (i.integer) v.push_back(i.format);
  return v;
}

std::unique_ptr<Kernels> Make(Isa isa, Path path, int threads) {
  KernelConfig c;
  c.isa = isa;
  c.path = path;
  c.threads = threads;
  auto k = Kernels::Create(c);
  EXPECT_TRUE(k.ok()) << k.status();
  return std::move(k).value();
}

// Output buffer of n floats followed by guard values.
struct Guarded {
  explicit Guarded(int64_t n, float fill = 0.0f) : n(n), v(static_cast<size_t>(n + kGuard), fill) {
    for (int i = 0; i < kGuard; ++i) std::memcpy(&v[n + i], &kGuardBits, 4);
  }
  float* data() { return v.data(); }
  bool GuardsIntact() const {
    for (int i = 0; i < kGuard; ++i)
      if (std::memcmp(&v[n + i], &kGuardBits, 4) != 0) return false;
    return true;
  }
  std::vector<float> Values() const { return std::vector<float>(v.begin(), v.begin() + n); }
  int64_t n;
  std::vector<float> v;
};

std::vector<float> RunMatmul(Kernels& k, const OwnedMatrix& m, const std::vector<float>& x, int64_t s) {
  Guarded y(s * m.rows);
  const absl::Status st = k.Matmul(m.view(), x.data(), s, y.data());
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_TRUE(y.GuardsIntact()) << "output overrun, " << Name(m.format);
  return y.Values();
}

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Shape {
  int64_t rows, cols;
};
const Shape kShapes[] = {{1, 1},   {3, 7},    {5, 33},   {17, 127}, {9, 129},
                         {4, 200}, {6, 384},  {33, 513}, {2, 1000}, {3, 16384}};
const int64_t kBatches[] = {1, 2, 3, 4, 5, 9};

TEST(KernelsIdotTest, EveryIsaBitIdenticalToScalar) {
  auto ref = Make(Isa::kScalar, Path::kIdot, 1);
  for (QFormat f : IntegerFormats()) {
    for (const Shape& sh : kShapes) {
      const auto wf = RandomVector(sh.rows * sh.cols, 11 + static_cast<uint32_t>(sh.cols));
      const OwnedMatrix m = Quantize(f, sh.rows, sh.cols, wf);
      for (int64_t s : kBatches) {
        if (sh.cols >= 16384 && s > 2) continue;
        const auto x = RandomVector(s * sh.cols, 7 + static_cast<uint32_t>(s), -3.0f, 3.0f);
        const auto want = RunMatmul(*ref, m, x, s);
        for (Isa isa : TestIsas()) {
          for (int threads : {1, 2}) {
            auto k = Make(isa, Path::kIdot, threads);
            EXPECT_TRUE(BitEqual(RunMatmul(*k, m, x, s), want))
                << Name(f) << " " << IsaName(isa) << " " << sh.rows << "x" << sh.cols << " S=" << s
                << " threads=" << threads;
          }
        }
      }
    }
  }
}

// Every int16 / int32 bound the AVX2 and VNNI proofs rely on, at its maximum:
// all weight codes at -128 / +127 (q4: -8 / +7, q2: -2 / +1) against
// activations all at -127 / +127, so every pair hits its bound. Checked
// against an exact integer sum, not only against the scalar reference.
TEST(KernelsIdotTest, Avx2NoSaturationAtExtremes) {
  const int64_t cols = 16384 + 64 + 5;
  for (QFormat f : IntegerFormats()) {
    const QFormatInfo& info = Info(f);
    for (int wsign : {-1, 1}) {
      for (int xsign : {-1, 1}) {
        OwnedMatrix m = Quantize(f, 2, cols, std::vector<float>(2 * cols, 0.0f));
        const int code = wsign < 0 ? -info.qmax - 1 : info.qmax;
        const int other = wsign < 0 ? info.qmax : -info.qmax - 1;  // row 1 mixes both extremes
        for (int64_t r = 0; r < 2; ++r)
          for (int64_t i = 0; i < cols; ++i)
            testing::PutCode(f, m.data.data() + r * RowBytes(f, cols), i, r == 1 && i % 3 == 0 ? other : code);
        std::fill(m.scales.begin(), m.scales.end(), 1.0f);
        const std::vector<float> x(static_cast<size_t>(cols), static_cast<float>(xsign));
        // q_x = +-127, x scale = 1/127 -> y = sum(q_w * q_x) / 127 exactly in ints.
        for (Isa isa : TestIsas()) {
          auto k = Make(isa, Path::kIdot, 1);
          const auto y = RunMatmul(*k, m, x, 1);
          for (int64_t r = 0; r < 2; ++r) {
            int64_t exact = 0;
            for (int64_t i = 0; i < cols; ++i) exact += (r == 1 && i % 3 == 0 ? other : code) * 127 * xsign;
            const double want = static_cast<double>(exact) * (1.0 / 127.0);
            EXPECT_NEAR(y[r], want, 1e-5 * std::abs(want) + 1e-3)
                << Name(f) << " " << IsaName(isa) << " wsign=" << wsign << " xsign=" << xsign << " row " << r;
          }
        }
      }
    }
  }
}

TEST(KernelsIdotTest, AllZeroRowsGiveZero) {
  for (QFormat f : IntegerFormats()) {
    OwnedMatrix m = Quantize(f, 5, 300, RandomVector(5 * 300, 3));
    const OwnedMatrix zero_w = Quantize(f, 5, 300, std::vector<float>(5 * 300, 0.0f));
    std::vector<float> x = RandomVector(3 * 300, 4);
    std::fill(x.begin() + 300, x.begin() + 600, 0.0f);  // row 1 all zero
    for (Isa isa : TestIsas()) {
      auto k = Make(isa, Path::kIdot, 2);
      const auto y = RunMatmul(*k, m, x, 3);
      for (int o = 0; o < 5; ++o) EXPECT_EQ(y[5 + o], 0.0f) << Name(f) << " " << IsaName(isa);
      const auto y0 = RunMatmul(*k, zero_w, x, 3);
      for (float v : y0) EXPECT_EQ(v, 0.0f) << Name(f) << " " << IsaName(isa);
    }
  }
}

// IDOT vs the exact product: the error is the activation rounding (half a
// step per element, times |w|) plus f32 accumulation.
TEST(KernelsIdotTest, WithinActivationQuantizationErrorOfDoubleReference) {
  for (QFormat f : IntegerFormats()) {
    const int64_t O = 7, I = 777, S = 3;
    const OwnedMatrix m = Quantize(f, O, I, RandomVector(O * I, 5));
    const auto x = RandomVector(S * I, 6, -2.0f, 2.0f);
    std::vector<double> ref, absref;
    testing::ReferenceMatmul(m, x, S, &ref, &absref);
    auto k = Make(BestIsa(), Path::kIdot, 1);
    const auto y = RunMatmul(*k, m, x, S);
    const int64_t gs = GroupSize(f, I);
    for (int64_t s = 0; s < S; ++s)
      for (int64_t o = 0; o < O; ++o) {
        double bound = 1e-5 * absref[s * O + o];
        for (int64_t g0 = 0; g0 < I; g0 += gs) {
          double amax = 0, wabs = 0;
          for (int64_t i = g0; i < std::min(I, g0 + gs); ++i) {
            amax = std::max(amax, static_cast<double>(std::fabs(x[s * I + i])));
            wabs += std::fabs(testing::Dequant(m, o, i));
          }
          bound += 0.5 * amax / 127.0 * wabs * 1.0001;
        }
        EXPECT_NEAR(y[s * O + o], ref[s * O + o], bound) << Name(f);
      }
  }
}

TEST(KernelsFloatPathTest, EveryFormatAndIsaWithinToleranceOfDouble) {
  for (const auto& info : kQFormatTable) {
    for (const Shape& sh : kShapes) {
      const OwnedMatrix m = Quantize(info.format, sh.rows, sh.cols, RandomVector(sh.rows * sh.cols, 21));
      const int64_t s = sh.cols >= 16384 ? 2 : 5;
      const auto x = RandomVector(s * sh.cols, 22, -3.0f, 3.0f);
      std::vector<double> ref, absref;
      testing::ReferenceMatmul(m, x, s, &ref, &absref);
      for (Isa isa : TestIsas()) {
        auto k = Make(isa, Path::kFloat, 2);
        const auto y = RunMatmul(*k, m, x, s);
        for (size_t i = 0; i < y.size(); ++i)
          ASSERT_NEAR(y[i], ref[i], kFloatRelTol * absref[i] + 1e-30)
              << info.name << " " << IsaName(isa) << " " << sh.rows << "x" << sh.cols << " at " << i;
      }
    }
  }
}

// Row s of y is bit-identical whatever S is and whatever the other rows hold.
TEST(KernelsBatchInvarianceTest, RowsIndependentOfBatchAndNeighbours) {
  const int64_t O = 13, I = 700, S = 11;
  for (const auto& info : kQFormatTable) {
    const OwnedMatrix m = Quantize(info.format, O, I, RandomVector(O * I, 31));
    const auto x = RandomVector(S * I, 32);
    auto other = RandomVector(S * I, 33, -5.0f, 5.0f);
    for (Isa isa : TestIsas()) {
      for (Path path : {Path::kFloat, Path::kIdot}) {
        if (path == Path::kIdot && !info.integer) continue;
        auto k = Make(isa, path, 2);
        const auto full = RunMatmul(*k, m, x, S);
        for (int64_t s = 0; s < S; ++s) {
          const std::vector<float> xs(x.begin() + s * I, x.begin() + (s + 1) * I);
          const auto one = RunMatmul(*k, m, xs, 1);
          EXPECT_EQ(std::memcmp(one.data(), full.data() + s * O, O * sizeof(float)), 0)
              << info.name << " " << IsaName(isa) << " " << PathName(path) << " s=" << s;
          // Same row at a different position among different neighbours.
          auto mixed = other;
          const int64_t pos = (s * 5 + 3) % S;
          std::copy(xs.begin(), xs.end(), mixed.begin() + pos * I);
          const auto y2 = RunMatmul(*k, m, mixed, S);
          EXPECT_EQ(std::memcmp(y2.data() + pos * O, full.data() + s * O, O * sizeof(float)), 0)
              << info.name << " " << IsaName(isa) << " " << PathName(path) << " s=" << s;
        }
        auto k1 = Make(isa, path, 1);
        EXPECT_TRUE(BitEqual(RunMatmul(*k1, m, x, S), full)) << "thread count changed results";
      }
    }
  }
}

TEST(KernelsDispatchTest, EnvForcesVariantAndBadNamesFail) {
  ASSERT_EQ(setenv("MOE_KERNEL_ISA", "scalar", 1), 0);
  auto k = Kernels::Create(KernelConfig{});
  ASSERT_TRUE(k.ok());
  EXPECT_EQ((*k)->isa(), Isa::kScalar);
  ASSERT_EQ(setenv("MOE_KERNEL_ISA", "sse9", 1), 0);
  auto bad = Kernels::Create(KernelConfig{});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(bad.status().message()).find("sse9"), std::string::npos);
  unsetenv("MOE_KERNEL_ISA");
  auto best = Kernels::Create(KernelConfig{});
  ASSERT_TRUE(best.ok());
  EXPECT_EQ((*best)->isa(), BestIsa());
  EXPECT_TRUE(IsaSupported(Isa::kScalar));
#ifdef MOE_NO_AVX512
  EXPECT_FALSE(IsaSupported(Isa::kAvx512));
  KernelConfig c;
  c.isa = Isa::kAvx512;
  EXPECT_EQ(Kernels::Create(c).status().code(), absl::StatusCode::kFailedPrecondition);
#endif
}

TEST(KernelsValidationTest, BadInputsAreClearErrors) {
  auto k = Make(Isa::kScalar, Path::kIdot, 1);
  const OwnedMatrix f32 = Quantize(QFormat::kF32, 2, 8, RandomVector(16, 1));
  std::vector<float> x(16), y(4);
  auto st = k->Matmul(f32.view(), x.data(), 2, y.data());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("f32"), std::string::npos);
  QMatrix noscale = Quantize(QFormat::kQ4G32, 2, 8, RandomVector(16, 1)).view();
  noscale.scales = nullptr;
  st = k->Matmul(noscale, x.data(), 2, y.data());
  EXPECT_NE(std::string(st.message()).find("null scales"), std::string::npos);
  QMatrix huge = noscale;
  huge.cols = kMaxCols + 1;
  EXPECT_EQ(k->Matmul(huge, x.data(), 1, y.data()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(k->MatmulRows(f32.view(), 1, 3, x.data(), 1, y.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseIsa("avx1024").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moe::kernels
