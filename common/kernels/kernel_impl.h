// Internal contract between the kernel driver (kernels.cc, baseline ISA) and
// the per-ISA kernel files (scalar.cc, avx2.cc, avx512.cc). Not a public API.
//
// Blocks (float path): every stored row is cut into blocks of 64 weight
// bytes (64 q8, 128 q4, 256 q2, 16 f32, 32 bf16 elements); the last block is
// zero-padded. The prepared float activations use the same blocks,
// zero-padded, and for q4 / q2 are permuted per block into bit planes: plane
// p holds the elements stored in bits [p*bits, (p+1)*bits) of the 64 weight
// bytes, i.e. for q4 [x0 x2 x4 ... x126 | x1 x3 ... x127], for q2
// [x0 x4 ..| x1 x5 ..| ..]. Plane byte t then multiplies weight byte t, so a
// SIMD lane needs no shuffles.
//
// IDOT vectors and units: a row is cut into units; a unit is a sequence of
// unit_blocks "vectors" of 64 weight bytes. Per-row formats: one unit = the
// whole row, vector j = block j. Grouped formats: one unit = 4 consecutive
// weight groups (4 * GB bytes, GB = group bytes = 16, 32, 64 or 128), so
// unit_blocks = GB / 16; vector j = the 16-byte chunk j of each of the 4
// groups, side by side: bytes [g*GB + 16j, g*GB + 16j + 16) of the unit go to
// vector bytes [16g, 16g + 16). Bytes past the row end are zero. Lane k
// (0..15) of a vector = its bytes 4k..4k+3, so lanes 4g..4g+3 hold group g
// only: one float epilogue per unit serves 4 groups (for q4_g128 that is 4x
// fewer epilogues than one per 64-byte block). The prepared int8 activations
// follow the vectors: [vector][plane][64], plane p byte t = the element in
// bits p of weight byte t of the vector.
//
// IDOT canonical order (what makes every ISA bit-identical):
//   P[k] = exact int32 sum over the unit's vectors of q_w * q_x over lane k's
//   elements (all planes). Then, per unit,
//     facc[k] = fma(float(P[k]), ws_lane[k] * xs_lane[k], facc[k])   (f32)
//   y = ((facc[i]+facc[i+8]) -> (+i+4) -> (+i+2) -> (+i+1)) (Reduce16).
//   Integer sums are exact in any order, so ISAs may use different integer
//   tricks (VNNI bias, maddubs sign trick); the float steps are identical.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/format/qformat.h"
#include "common/kernels/kernels.h"

namespace moe::kernels::internal {

inline constexpr int kLanes = 16;
inline constexpr int kBlockBytes = 64;

// Geometry of one (format, cols) pair.
struct Layout {
  QFormat format = QFormat::kF32;
  int bits = 32;
  int planes = 1;           // elements per weight byte (q8 1, q4 2, q2 4); 1 for float formats
  int64_t cols = 0;
  int64_t row_bytes = 0;
  int64_t gpr = 0;          // scale groups per row (0 for float formats)
  int64_t group = 0;        // elements per weight scale group (cols for per-row)
  bool per_row = false;     // one scale per row
  int64_t block_elems = 0;  // elements per 64-byte block
  int64_t nblocks = 0;      // blocks per row (last one padded)
  int64_t act_stride = 0;   // prepared float activation elements per row = nblocks * block_elems
  // IDOT only:
  int bias = 0;             // unsigned offset of the stored code (q8 128, q4 8, q2 2)
  int64_t gbytes = 0;       // bytes per weight group (grouped formats)
  int64_t unit_blocks = 0;  // 64-byte vectors per unit (gbytes / 16; per-row: nblocks)
  int64_t nunits = 0;
  int64_t idot_stride = 0;  // prepared int8 activation bytes per row = nunits * unit_blocks * block_elems
  int gpu = 1;              // weight groups per unit (16 wide, 4 grouped, 1 per-row)
  int lanes_per_group = 16;
  bool wide = false;        // grouped, units of 16 groups (group bytes <= 32)
  int64_t unit_bytes = 0;   // weight bytes per unit (grouped: gpu * gbytes)
};

Layout MakeLayout(QFormat format, int64_t cols);

// Prepared int8 activations for IDOT (S rows).
struct IdotActs {
  const int8_t* q = nullptr;   // [S][idot_stride], vector/plane order as described above
  const int32_t* c = nullptr;  // [S][nunits*16]: -bias * sum of q_x over lane k of unit u
  const float* xs = nullptr;   // [S][nunits*16]: activation scale of lane k's group (0 if none)
  int64_t lane_stride = 0;     // nunits*16
};

// Prepared float activations (S rows, [S][act_stride], permuted like IdotActs::q).
struct FloatActs {
  const float* x = nullptr;
};

// Output epilogue: y[s*ldy + o] = v, or += alpha[s] * v when alpha is set.
struct Out {
  float* y = nullptr;
  int64_t ldy = 0;
  const float* alpha = nullptr;
};

inline void Store(const Out& out, int64_t s, int64_t o, float v) {
  float* p = out.y + s * out.ldy + o;
  if (out.alpha != nullptr) {
    const float t = out.alpha[s] * v;
    *p = *p + t;
  } else {
    *p = v;
  }
}

// Canonical 16-lane reduction tree.
inline float Reduce16(const float* a) {
  float b[8], c[4];
  for (int i = 0; i < 8; ++i) b[i] = a[i] + a[i + 8];
  for (int i = 0; i < 4; ++i) c[i] = b[i] + b[i + 4];
  const float d0 = c[0] + c[2], d1 = c[1] + c[3];
  return d0 + d1;
}

// Pointer to block b of a row; copies a partial last block into tmp (zeroed).
inline const uint8_t* BlockPtr(const uint8_t* row, int64_t b, int64_t row_bytes, uint8_t* tmp) {
  const int64_t off = b * kBlockBytes;
  if (off + kBlockBytes <= row_bytes) return row + off;
  std::memset(tmp, 0, kBlockBytes);
  std::memcpy(tmp, row + off, static_cast<size_t>(row_bytes - off));
  return tmp;
}

// First weight byte (in the row) of lane p (0..15) of IDOT vector j of unit
// u; a lane covers 4 consecutive weight bytes. Per-row: block j. 4-group
// units: chunk j of group p/4, dword p%4. Wide (16-group) units: vector
// j = 4c + d, lane p = dword d of chunk c of group 4(p%4) + p/4.
inline int64_t LaneByte0(const Layout& L, int64_t u, int64_t j, int p) {
  if (L.per_row) return j * kBlockBytes + 4 * p;
  if (!L.wide) return (4 * u + p / 4) * L.gbytes + 16 * j + 4 * (p % 4);
  const int64_t c = j / 4, d = j % 4;
  return (16 * u + 4 * (p % 4) + p / 4) * L.gbytes + 16 * c + 4 * d;
}
// Group (within the row) of lane k of unit u; per-row formats: 0.
inline int64_t LaneGroup(const Layout& L, int64_t u, int k) {
  if (L.per_row) return 0;
  if (!L.wide) return 4 * u + k / 4;
  return 16 * u + 4 * (k % 4) + k / 4;
}
// Copies IDOT vector j of unit u of a row (64 bytes, zero past the row end).
inline void IdotVecCopy(const Layout& L, const uint8_t* row, int64_t u, int64_t j, uint8_t* out) {
  for (int p = 0; p < kLanes; ++p) {
    const int64_t off = LaneByte0(L, u, j, p);
    for (int i = 0; i < 4; ++i) out[4 * p + i] = off + i < L.row_bytes ? row[off + i] : 0;
  }
}
// Units [0, n) that lie inside the row with all their groups (SIMD kernels
// load weights and scales of those directly); only the last unit can be partial.
inline int64_t IdotFastUnits(const Layout& L) {
  if (L.per_row) return L.row_bytes % kBlockBytes == 0 ? L.nunits : 0;
  return std::min<int64_t>(L.row_bytes / L.unit_bytes, L.gpr / L.gpu);
}

// Weight scale of each lane of unit u (0 for groups past the row end).
inline void WeightLanes(const Layout& L, const float* ws_row, int64_t u, float* out) {
  for (int k = 0; k < kLanes; ++k) {
    const int64_t g = LaneGroup(L, u, k);
    out[k] = g < L.gpr ? ws_row[g] : 0.0f;
  }
}
// True if all groups of unit u exist (SIMD kernels may then load scales directly).
inline bool UnitComplete(const Layout& L, int64_t u) {
  return L.per_row || (u + 1) * L.gpu <= L.gpr;
}

// Group index of a 16-byte chunk j (0..3) of block b, for the float path.
inline int64_t ChunkGroup(const Layout& L, int64_t b, int j) {
  if (L.per_row) return 0;
  const int64_t g = (b * L.block_elems + j * 16 * L.planes) / L.group;
  return g < L.gpr ? g : L.gpr - 1;  // padded chunks multiply zeros
}

using IdotFn = void (*)(const Layout& L, const QMatrix& w, const IdotActs& a, int64_t s,
                        int64_t o0, int64_t o1, const Out& out);
using FloatFn = void (*)(const Layout& L, const QMatrix& w, const FloatActs& a, int64_t s,
                         int64_t o0, int64_t o1, const Out& out);

// Runs `iters` iterations of the ISA's int8 dot instruction mix on
// registers only; returns the multiply-adds done (for the peak probe).
using PeakFn = int64_t (*)(int64_t iters);

struct IsaTable {
  IdotFn idot;
  FloatFn fdot;
  PeakFn peak;
};

const IsaTable& ScalarTable();
const IsaTable& Avx2Table();
#ifndef MOE_NO_AVX512
const IsaTable& Avx512Table();
#endif

const IsaTable& TableFor(Isa isa);  // scalar for kAuto

// Activation preparation (baseline code, shared by all ISAs so the int8
// activations are identical everywhere).
void PrepareIdot(const Layout& L, const float* x, int64_t s, int8_t* q, int32_t* c, float* xs);
void PrepareFloat(const Layout& L, const float* x, int64_t s, float* xp);
// Dequantizes columns [c0, c1) of row r of w into out[c1 - c0] (c1 < 0: cols).
void DequantizeRow(const QMatrix& w, int64_t r, float* out, int64_t c0 = 0, int64_t c1 = -1);

}  // namespace moe::kernels::internal
