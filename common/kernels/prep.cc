// Layout geometry, activation preparation and row dequantization. Compiled
// with baseline flags only: the int8 activations every ISA consumes come from
// this one implementation, so they are identical across ISAs.
#include <algorithm>
#include <cmath>
#include <cstring>

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
    } else {
      const int64_t unit_elems = std::max<int64_t>(info.group, L.block_elems);
      L.unit_blocks = unit_elems / L.block_elems;
      L.gpu = static_cast<int>(unit_elems / info.group);
    }
    L.nunits = (L.nblocks + L.unit_blocks - 1) / L.unit_blocks;
    L.lanes_per_group = kLanes / L.gpu;
  }
  return L;
}

namespace {
// Index of element e inside the prepared (block-permuted) activation row.
inline int64_t PermutedIndex(const Layout& L, int64_t e) {
  const int64_t b = e / L.block_elems, i = e % L.block_elems;
  return b * L.block_elems + (i % L.planes) * kBlockBytes + i / L.planes;
}
}  // namespace

void PrepareIdot(const Layout& L, const float* x, int64_t s, int8_t* q, int32_t* c, float* xs) {
  const int64_t ngroups = L.per_row ? 1 : L.gpr;
  const int64_t lane_stride = L.nunits * kLanes;
  for (int64_t r = 0; r < s; ++r) {
    const float* xr = x + r * L.cols;
    int8_t* qr = q + r * L.act_stride;
    std::memset(qr, 0, static_cast<size_t>(L.act_stride));
    float gscale[kMaxCols / 32 + 1];
    for (int64_t g = 0; g < ngroups; ++g) {
      const int64_t e0 = g * L.group, e1 = std::min(L.cols, e0 + L.group);
      float amax = 0.0f;
      for (int64_t e = e0; e < e1; ++e) amax = std::max(amax, std::fabs(xr[e]));
      gscale[g] = amax / 127.0f;
      if (amax == 0.0f) continue;  // all-zero group: codes 0, scale 0
      const float inv = 127.0f / amax;
      for (int64_t e = e0; e < e1; ++e) {
        const float v = std::nearbyint(xr[e] * inv);
        qr[PermutedIndex(L, e)] = static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
      }
    }
    int32_t* cr = c + r * lane_stride;
    float* sr = xs + r * lane_stride;
    for (int64_t u = 0; u < L.nunits; ++u) {
      const int64_t b0 = u * L.unit_blocks, b1 = std::min(L.nblocks, b0 + L.unit_blocks);
      for (int k = 0; k < kLanes; ++k) {
        int32_t sum = 0;
        for (int64_t b = b0; b < b1; ++b)
          for (int p = 0; p < L.planes; ++p)
            for (int t = 4 * k; t < 4 * k + 4; ++t) sum += qr[b * L.block_elems + p * kBlockBytes + t];
        cr[u * kLanes + k] = -L.bias * sum;
        const int64_t g = L.per_row ? 0 : u * L.gpu + k / L.lanes_per_group;
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
      for (int64_t e = 0; e < L.cols; ++e) pr[PermutedIndex(L, e)] = xr[e];
    }
  }
}

void DequantizeRow(const QMatrix& w, int64_t r, float* out) {
  const Layout L = MakeLayout(w.format, w.cols);
  const uint8_t* row = w.data + r * L.row_bytes;
  const float* ws = w.scales == nullptr ? nullptr : w.scales + r * L.gpr;
  for (int64_t i = 0; i < w.cols; ++i) {
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
