// Scalar reference kernels: the definition of the IDOT canonical order
// (kernel_impl.h) written as plain loops, and a plain f32 float path.
// Compiled with baseline flags; also the fallback on CPUs without AVX2.
#include <algorithm>
#include <cmath>

#include "common/kernels/kernel_impl.h"

namespace moe::kernels::internal {
namespace {

void IdotScalar(const Layout& L, const QMatrix& w, const IdotActs& a, int64_t s, int64_t o0,
                int64_t o1, const Out& out) {
  alignas(64) uint8_t vec[kBlockBytes];
  const int mask = (1 << L.bits) - 1;
  for (int64_t o = o0; o < o1; ++o) {
    const uint8_t* row = w.data + o * L.row_bytes;
    const float* ws = w.scales + o * L.gpr;
    for (int64_t r = 0; r < s; ++r) {
      const int8_t* xq = a.q + r * L.idot_stride;
      float facc[kLanes] = {};
      for (int64_t u = 0; u < L.nunits; ++u) {
        int32_t p[kLanes];
        for (int k = 0; k < kLanes; ++k) p[k] = a.c[r * a.lane_stride + u * kLanes + k];
        for (int64_t j = 0; j < L.unit_blocks; ++j) {
          IdotVecCopy(L, row, u, j, vec);
          const int8_t* xb = xq + (u * L.unit_blocks + j) * L.block_elems;
          for (int t = 0; t < kBlockBytes; ++t) {
            const int byte = L.bits == 8 ? (vec[t] ^ 0x80) : vec[t];  // q + bias, unsigned
            int32_t sum = 0;
            for (int pl = 0; pl < L.planes; ++pl)
              sum += ((byte >> (pl * L.bits)) & mask) * xb[pl * kBlockBytes + t];
            p[t / 4] += sum;
          }
        }
        float wl[kLanes];
        WeightLanes(L, ws, u, wl);
        for (int k = 0; k < kLanes; ++k) {
          const float sc = wl[k] * a.xs[r * a.lane_stride + u * kLanes + k];
          facc[k] = std::fma(static_cast<float>(p[k]), sc, facc[k]);
        }
      }
      Store(out, r, o, Reduce16(facc));
    }
  }
}

void FloatScalar(const Layout& L, const QMatrix& w, const FloatActs& a, int64_t s, int64_t o0,
                 int64_t o1, const Out& out) {
  alignas(64) uint8_t tmp[kBlockBytes];
  const int mask = (1 << (L.bits & 31)) - 1;
  for (int64_t o = o0; o < o1; ++o) {
    const uint8_t* row = w.data + o * L.row_bytes;
    const float* ws = w.scales == nullptr ? nullptr : w.scales + o * L.gpr;
    for (int64_t r = 0; r < s; ++r) {
      const float* xr = a.x + r * L.act_stride;
      float acc = 0.0f;
      for (int64_t b = 0; b < L.nblocks; ++b) {
        const uint8_t* blk = BlockPtr(row, b, L.row_bytes, tmp);
        const float* xb = xr + b * L.block_elems;
        if (L.bits == 32 || L.bits == 16) {
          for (int64_t i = 0; i < L.block_elems; ++i) {
            float v;
            if (L.bits == 32) {
              std::memcpy(&v, blk + 4 * i, 4);
            } else {
              uint16_t h;
              std::memcpy(&h, blk + 2 * i, 2);
              const uint32_t u = static_cast<uint32_t>(h) << 16;
              std::memcpy(&v, &u, 4);
            }
            acc += v * xb[i];
          }
          continue;
        }
        for (int j = 0; j < 4; ++j) {  // 16-byte chunks, each inside one group
          float t = 0.0f;
          for (int pl = 0; pl < L.planes; ++pl)
            for (int i = 16 * j; i < 16 * j + 16; ++i) {
              const int code = L.bits == 8 ? static_cast<int8_t>(blk[i])
                                           : ((blk[i] >> (pl * L.bits)) & mask) - L.bias;
              t += static_cast<float>(code) * xb[pl * kBlockBytes + i];
            }
          acc += t * ws[ChunkGroup(L, b, j)];
        }
      }
      Store(out, r, o, acc);
    }
  }
}

int64_t PeakScalar(int64_t iters) {
  int32_t acc[8] = {};
  for (int64_t n = 0; n < iters; ++n)
    for (int i = 0; i < 8; ++i) {
      acc[i] += 3 * static_cast<int8_t>(-5 + i);
      __asm__ volatile("" : "+r"(acc[i]));
    }
  volatile int32_t sink = acc[0];
  (void)sink;
  return iters * 8;
}

}  // namespace

const IsaTable& ScalarTable() {
  static constexpr IsaTable kTable = {IdotScalar, FloatScalar, PeakScalar};
  return kTable;
}

}  // namespace moe::kernels::internal
