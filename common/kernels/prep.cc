// Layout geometry, activation preparation and row dequantization. Compiled
// with baseline flags only: the int8 activations every ISA consumes come from
// this one implementation, so they are identical across ISAs.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/kernels/kernel_impl.h"

namespace moe::kernels::internal {

Layout MakeLayout(QFormat format, int64_t cols) {
  const QFormatInfo& info = Info(format);
  Layout L;
  L.format = format;
  L.bits = info.bits;
  L.planes = info.integer ? 8 / info.bits : 1;
  L.cols = cols;
  L.row_bytes = RowBytes(format, cols);
  L.gpr = GroupsPerRow(format, cols);
  L.per_row = info.group == 0;
  L.group = info.group > 0 ? info.group : cols;
  L.block_elems = kBlockBytes * 8 / info.bits;
  L.nblocks = cols <= 0 ? 0 : (cols + L.block_elems - 1) / L.block_elems;
  L.act_stride = L.nblocks * L.block_elems;
  if (info.integer) {
    L.bias = 1 << (info.bits - 1);
    if (L.per_row) {
      L.unit_blocks = std::max<int64_t>(L.nblocks, 1);
      L.gpu = 1;
      L.nunits = 1;
    } else {
      L.gbytes = static_cast<int64_t>(info.group) * info.bits / 8;  // 16..128
      // Groups of <= 32 bytes: units of 16 groups (one lane per group), else 4.
      L.wide = L.gbytes <= 32;
      L.gpu = L.wide ? 16 : 4;
      L.unit_bytes = L.gpu * L.gbytes;
      L.unit_blocks = L.unit_bytes / kBlockBytes;
      L.nunits = (L.row_bytes + L.unit_bytes - 1) / L.unit_bytes;
    }
    L.lanes_per_group = kLanes / L.gpu;
    L.idot_stride = L.nunits * L.unit_blocks * L.block_elems;
  }
  return L;
}

namespace {
// Index of element e inside the prepared (block-permuted) activation row.
inline int64_t PermutedIndex(const Layout& L, int64_t e) {
  const int64_t b = e / L.block_elems, i = e % L.block_elems;
  return b * L.block_elems + (i % L.planes) * kBlockBytes + i / L.planes;
}

// max |x[e]| over [0, n).
float AbsMax(const float* x, int64_t n) {
  int64_t e = 0;
  float amax = 0.0f;
#if defined(__SSE2__)
  const __m128 sign = _mm_set1_ps(-0.0f);
  __m128 m0 = _mm_setzero_ps(), m1 = _mm_setzero_ps();
  for (; e + 8 <= n; e += 8) {
    m0 = _mm_max_ps(m0, _mm_andnot_ps(sign, _mm_loadu_ps(x + e)));
    m1 = _mm_max_ps(m1, _mm_andnot_ps(sign, _mm_loadu_ps(x + e + 4)));
  }
  alignas(16) float t[4];
  _mm_store_ps(t, _mm_max_ps(m0, m1));
  amax = std::max(std::max(t[0], t[1]), std::max(t[2], t[3]));
#endif
  for (; e < n; ++e) amax = std::max(amax, std::fabs(x[e]));
  return amax;
}

// q[e] = clamp(round_half_even(x[e] * inv), -127, 127) for e in [0, n). The
// SSE2 conversion rounds with MXCSR (nearest-even by default), exactly like
// std::nearbyint in the default rounding mode; clamping before or after
// rounding is the same because the bounds are integers.
void QuantizeSpan(const float* x, int64_t n, float inv, int8_t* q) {
  int64_t e = 0;
#if defined(__SSE2__)
  const __m128 vinv = _mm_set1_ps(inv), lo = _mm_set1_ps(-127.0f), hi = _mm_set1_ps(127.0f);
  auto conv = [&](int64_t i) {
    const __m128 v = _mm_mul_ps(_mm_loadu_ps(x + i), vinv);
    return _mm_cvtps_epi32(_mm_min_ps(_mm_max_ps(v, lo), hi));
  };
  for (; e + 16 <= n; e += 16) {
    const __m128i a = _mm_packs_epi32(conv(e), conv(e + 4));
    const __m128i b = _mm_packs_epi32(conv(e + 8), conv(e + 12));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + e), _mm_packs_epi16(a, b));
  }
#endif
  for (; e < n; ++e) {
    const float v = std::nearbyint(x[e] * inv);
    q[e] = static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
  }
}

// Scatters the natural-order codes qt[idot_stride] (zero past cols) into the
// IDOT vector/plane order: vector v, plane p, byte 4k+i <- the element in
// bits p of weight byte LaneByte0(v, k) + i, i.e. 4 * PLANES consecutive
// elements per lane.
template <int PLANES>
void PermuteRow(const Layout& L, const int8_t* qt, int8_t* qr) {
  constexpr int64_t kBE = kBlockBytes * PLANES;
  for (int64_t u = 0; u < L.nunits; ++u)
    for (int64_t j = 0; j < L.unit_blocks; ++j) {
      int8_t* dst = qr + (u * L.unit_blocks + j) * kBE;
      for (int k = 0; k < kLanes; ++k) {
        const int8_t* src = qt + LaneByte0(L, u, j, k) * PLANES;
        for (int p = 0; p < PLANES; ++p)
          for (int i = 0; i < 4; ++i) dst[p * kBlockBytes + 4 * k + i] = src[i * PLANES + p];
      }
    }
}
}  // namespace

void PrepareIdot(const Layout& L, const float* x, int64_t s, int8_t* q, int32_t* c, float* xs) {
  const int64_t ngroups = L.per_row ? 1 : L.gpr;
  const int64_t lane_stride = L.nunits * kLanes;
  std::vector<int8_t> qt(static_cast<size_t>(L.idot_stride));
  std::vector<float> gscale(static_cast<size_t>(ngroups));
  for (int64_t r = 0; r < s; ++r) {
    const float* xr = x + r * L.cols;
    int8_t* qr = q + r * L.idot_stride;
    std::fill(qt.begin() + L.cols, qt.end(), int8_t{0});
    for (int64_t g = 0; g < ngroups; ++g) {
      const int64_t e0 = g * L.group, e1 = std::min(L.cols, e0 + L.group);
      const float amax = AbsMax(xr + e0, e1 - e0);
      gscale[g] = amax / 127.0f;
      if (amax == 0.0f) {  // all-zero group: codes 0, scale 0
        std::fill(qt.begin() + e0, qt.begin() + e1, int8_t{0});
        continue;
      }
      QuantizeSpan(xr + e0, e1 - e0, 127.0f / amax, qt.data() + e0);
    }
    switch (L.planes) {
      case 1: PermuteRow<1>(L, qt.data(), qr); break;
      case 2: PermuteRow<2>(L, qt.data(), qr); break;
      default: PermuteRow<4>(L, qt.data(), qr); break;
    }
    int32_t* cr = c + r * lane_stride;
    float* sr = xs + r * lane_stride;
    for (int64_t u = 0; u < L.nunits; ++u) {
      int32_t sum[kLanes] = {};
      for (int64_t j = 0; j < L.unit_blocks; ++j)
        for (int p = 0; p < L.planes; ++p) {
          const int8_t* v = qr + (u * L.unit_blocks + j) * L.block_elems + p * kBlockBytes;
          for (int k = 0; k < kLanes; ++k) sum[k] += v[4 * k] + v[4 * k + 1] + v[4 * k + 2] + v[4 * k + 3];
        }
      for (int k = 0; k < kLanes; ++k) {
        cr[u * kLanes + k] = -L.bias * sum[k];
        const int64_t g = LaneGroup(L, u, k);
        sr[u * kLanes + k] = g < ngroups ? gscale[g] : 0.0f;
      }
    }
  }
}

void PrepareFloat(const Layout& L, const float* x, int64_t s, float* xp) {
  for (int64_t r = 0; r < s; ++r) {
    const float* xr = x + r * L.cols;
    float* pr = xp + r * L.act_stride;
    std::memset(pr, 0, static_cast<size_t>(L.act_stride) * sizeof(float));
    if (L.planes == 1) {
      std::memcpy(pr, xr, static_cast<size_t>(L.cols) * sizeof(float));
    } else {
      const int64_t full = L.cols / L.block_elems;  // blocks without padding
      for (int64_t b = 0; b < full; ++b)
        for (int p = 0; p < L.planes; ++p)
          for (int t = 0; t < kBlockBytes; ++t)
            pr[b * L.block_elems + p * kBlockBytes + t] = xr[b * L.block_elems + t * L.planes + p];
      for (int64_t e = full * L.block_elems; e < L.cols; ++e) pr[PermutedIndex(L, e)] = xr[e];
    }
  }
}

void DequantizeRow(const QMatrix& w, int64_t r, float* out, int64_t c0, int64_t c1) {
  if (c1 < 0) c1 = w.cols;
  const Layout L = MakeLayout(w.format, w.cols);
  const uint8_t* row = w.data + r * L.row_bytes;
  const float* ws = w.scales == nullptr ? nullptr : w.scales + r * L.gpr;
  out -= c0;
  for (int64_t i = c0; i < c1; ++i) {
    switch (L.bits) {
      case 32: std::memcpy(&out[i], row + 4 * i, 4); break;
      case 16: {
        uint16_t h;
        std::memcpy(&h, row + 2 * i, 2);
        const uint32_t u = static_cast<uint32_t>(h) << 16;
        std::memcpy(&out[i], &u, 4);
        break;
      }
      default: {
        int q;
        if (L.bits == 8) q = static_cast<int8_t>(row[i]);
        else if (L.bits == 4) q = ((row[i / 2] >> (4 * (i % 2))) & 15) - 8;
        else q = ((row[i / 4] >> (2 * (i % 4))) & 3) - 2;
        out[i] = static_cast<float>(q) * ws[L.per_row ? 0 : i / L.group];
      }
    }
  }
}

}  // namespace moe::kernels::internal
