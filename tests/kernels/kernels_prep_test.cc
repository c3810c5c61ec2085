// The activation preparation (quantization to int8, block/plane permutation,
// lane sums, scale lanes) against a direct transcription of its definition in
// common/kernels/kernel_impl.h: the fast SSE2 path must give the same bytes.
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/kernels/kernel_impl.h"
#include "gtest/gtest.h"
#include "tests/kernels/test_quant.h"

namespace moe::kernels::internal {
namespace {

// Where element e goes in the prepared IDOT row (kernel_impl.h): its weight
// byte B = e / planes, plane e % planes; per-row formats: vector B / 64,
// byte B % 64; grouped: unit u = B / (4 GB), group g and offset gb inside the
// unit, vector u * UB + gb / 16, byte 16 g + gb % 16.
int64_t Dest(const Layout& L, int64_t e) {
  const int64_t byte = e / L.planes, p = e % L.planes;
  int64_t v, t;
  if (L.per_row) {
    v = byte / kBlockBytes;
    t = byte % kBlockBytes;
  } else if (!L.wide) {
    const int64_t u = byte / (4 * L.gbytes), ub = byte % (4 * L.gbytes);
    const int64_t g = ub / L.gbytes, gb = ub % L.gbytes;
    v = u * L.unit_blocks + gb / 16;
    t = 16 * g + gb % 16;
  } else {  // 16 groups per unit: group 4i + l -> lane 4l + i, dword d of chunk c -> vector 4c + d
    const int64_t u = byte / (16 * L.gbytes), ub = byte % (16 * L.gbytes);
    const int64_t g = ub / L.gbytes, gb = ub % L.gbytes;
    const int64_t lane = 4 * (g % 4) + g / 4, c = gb / 16, d = (gb % 16) / 4;
    v = u * L.unit_blocks + 4 * c + d;
    t = 4 * lane + gb % 4;
  }
  return v * L.block_elems + p * kBlockBytes + t;
}

// Definition: codes clamp(nearbyint(x * (127 / amax))) per group at Dest(e);
// c = -bias * (sum of the codes of lane k over the unit's vectors).
void ReferencePrepare(const Layout& L, const float* x, int64_t s, int8_t* q, int32_t* c, float* xs) {
  const int64_t ngroups = L.per_row ? 1 : L.gpr;
  const int64_t lane_stride = L.nunits * kLanes;
  for (int64_t r = 0; r < s; ++r) {
    const float* xr = x + r * L.cols;
    int8_t* qr = q + r * L.idot_stride;
    for (int64_t i = 0; i < L.idot_stride; ++i) qr[i] = 0;
    std::vector<float> gscale(static_cast<size_t>(ngroups));
    for (int64_t g = 0; g < ngroups; ++g) {
      const int64_t e0 = g * L.group, e1 = std::min(L.cols, e0 + L.group);
      float amax = 0.0f;
      for (int64_t e = e0; e < e1; ++e) amax = std::max(amax, std::fabs(xr[e]));
      gscale[g] = amax / 127.0f;
      if (amax == 0.0f) continue;
      const float inv = 127.0f / amax;
      for (int64_t e = e0; e < e1; ++e) {
        const float v = std::nearbyint(xr[e] * inv);
        qr[Dest(L, e)] = static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
      }
    }
    for (int64_t u = 0; u < L.nunits; ++u) {
      for (int k = 0; k < kLanes; ++k) {
        int32_t sum = 0;
        for (int64_t j = 0; j < L.unit_blocks; ++j)
          for (int p = 0; p < L.planes; ++p)
            for (int t = 4 * k; t < 4 * k + 4; ++t)
              sum += qr[(u * L.unit_blocks + j) * L.block_elems + p * kBlockBytes + t];
        c[r * lane_stride + u * kLanes + k] = -L.bias * sum;
        const int64_t g = L.per_row ? 0 : (L.wide ? 16 * u + 4 * (k % 4) + k / 4 : 4 * u + k / 4);
        xs[r * lane_stride + u * kLanes + k] = g < ngroups ? gscale[g] : 0.0f;
      }
    }
  }
}

// Every lane of a grouped unit holds one group: 4-group units lanes
// 4g..4g+3 <-> group 4u+g; 16-group units lane 4l+i <-> group 16u+4i+l.
TEST(KernelsPrepTest, GroupedLanesHoldOneGroup) {
  for (const auto& info : kQFormatTable) {
    if (!info.integer || info.group <= 0) continue;
    const int64_t cols = 40 * info.group + 5;
    const Layout L = MakeLayout(info.format, cols);
    EXPECT_EQ(L.gpu, L.gbytes <= 32 ? 16 : 4);
    EXPECT_EQ(L.unit_blocks * kBlockBytes, L.gpu * L.gbytes);
    for (int64_t e = 0; e < cols; ++e) {
      const int64_t d = Dest(L, e);
      const int64_t v = d / L.block_elems, t = d % kBlockBytes;
      const int64_t u = v / L.unit_blocks, lane = t / 4;
      const int64_t g = L.wide ? 16 * u + 4 * (lane % 4) + lane / 4 : 4 * u + lane / 4;
      ASSERT_EQ(g, e / info.group) << info.name << " element " << e;
    }
  }
}

TEST(KernelsPrepTest, FastPreparationMatchesDefinition) {
  const int64_t kCols[] = {1, 7, 31, 64, 100, 129, 255, 384, 1000, 6144};
  for (const auto& info : kQFormatTable) {
    if (!info.integer) continue;
    for (int64_t cols : kCols) {
      const Layout L = MakeLayout(info.format, cols);
      const int64_t s = 3;
      std::vector<float> x = testing::RandomVector(s * cols, static_cast<uint32_t>(cols) * 31 + 7, -3.0f, 3.0f);
      // Row 1: exact halves after scaling (round-half-even cases), row 2: a zero group.
      for (int64_t e = 0; e < cols; ++e) x[cols + e] = static_cast<float>((e % 255) - 127) + 0.5f;
      x[cols] = 127.0f;  // amax 127 -> scale 1, so k + 0.5 stays a tie
      for (int64_t e = 0; e < std::min<int64_t>(cols, 40); ++e) x[2 * cols + e] = 0.0f;
      const int64_t ls = L.nunits * kLanes;
      std::vector<int8_t> q1(static_cast<size_t>(s * L.idot_stride), 99), q2(q1.size(), -99);
      std::vector<int32_t> c1(static_cast<size_t>(s * ls)), c2(c1.size(), 1);
      std::vector<float> s1(static_cast<size_t>(s * ls)), s2(s1.size(), 1.0f);
      ReferencePrepare(L, x.data(), s, q1.data(), c1.data(), s1.data());
      PrepareIdot(L, x.data(), s, q2.data(), c2.data(), s2.data());
      EXPECT_EQ(q1, q2) << info.name << " cols " << cols;
      EXPECT_EQ(c1, c2) << info.name << " cols " << cols;
      EXPECT_EQ(s1, s2) << info.name << " cols " << cols;
    }
  }
}

}  // namespace
}  // namespace moe::kernels::internal
