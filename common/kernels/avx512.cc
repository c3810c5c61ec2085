// AVX-512 kernels (F + BW + VL + VNNI). Compiled with AVX-512 flags only in
// this file; reached through the dispatcher after CPUID + XCR0 checks.
//
// IDOT: vpdpbusd multiplies UNSIGNED weight codes (q + bias: q8 w^0x80 in
// 0..255, q4 nibble 0..15, q2 crumb 0..3) by SIGNED int8 activations and adds
// groups of 4 products into int32 without saturation. The bias is removed by
// starting each lane at c = -bias * sum(x) (precomputed per activation row),
// so every lane holds the exact integer sum the canonical order asks for.
// Overflow: |lane| <= 4*planes*255*127 per block; with cols <= 2^18 the per-row
// sum stays below 2^18/4 * 4 * 255 * 127 < 2^31 / 2.
#include <immintrin.h>

#include <algorithm>
#include <type_traits>

#include "common/kernels/kernel_impl.h"

namespace moe::kernels::internal {
namespace {

// Canonical Reduce16 (kernel_impl.h) on a zmm.
inline float Reduce(__m512 v) {
  const __m256 lo = _mm512_castps512_ps256(v);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  const __m256 b = _mm256_add_ps(lo, hi);
  const __m128 c = _mm_add_ps(_mm256_castps256_ps128(b), _mm256_extractf128_ps(b, 1));
  const __m128 d = _mm_add_ps(c, _mm_movehl_ps(c, c));
  return _mm_cvtss_f32(_mm_add_ss(d, _mm_shuffle_ps(d, d, 1)));
}

inline __m512 WeightLanes512(const Layout& L, const float* ws, int64_t u) {
  if (L.per_row) return _mm512_set1_ps(ws[0]);
  if (!UnitComplete(L, u) || L.gpu == 16) {
    alignas(64) float t[kLanes];
    WeightLanes(L, ws, u, t);
    return _mm512_load_ps(t);
  }
  const float* p = ws + u * L.gpu;
  if (L.gpu == 1) return _mm512_set1_ps(p[0]);
  if (L.gpu == 2) {
    const __m512 v = _mm512_castps128_ps512(_mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
    return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0), v);
  }
  const __m512 v = _mm512_castps128_ps512(_mm_loadu_ps(p));
  return _mm512_permutexvar_ps(_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0), v);
}

// Weight-scale lanes of a unit whose groups all exist. GPU: groups per unit
// (0 = per-row scale), a template constant so the hot loop has no branches.
template <int GPU>
inline __m512 FastLanes(const float* ws, int64_t u) {
  if constexpr (GPU == 0) {
    return _mm512_set1_ps(ws[0]);
  } else if constexpr (GPU == 1) {
    return _mm512_set1_ps(ws[u]);
  } else if constexpr (GPU == 2) {
    const __m512 v = _mm512_castps128_ps512(_mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(ws + 2 * u))));
    return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0), v);
  } else {
    const __m512 v = _mm512_castps128_ps512(_mm_loadu_ps(ws + 4 * u));
    return _mm512_permutexvar_ps(_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0), v);
  }
}

// Software prefetch distance for the weight stream (bytes ahead of the unit
// being read; past the row end it runs into the next rows, which are next in
// memory). Keeps DRAM latency overlapped with compute at S >= 4 where the
// hardware prefetcher alone left the loop stalled.
// (1024 and 2048 measured alike; 0 was 20-40 % slower at S = 4.)
inline constexpr int64_t kPrefetchBytes = 2048;

// OB weight rows against NR activation rows (register blocking both ways:
// one weight load + unpack feeds NR rows, one activation load feeds OB weight
// rows, which halves the L1 traffic of activations, lane sums and scales at
// OB = 2). SPLIT: two int32 chains per row (units of many blocks, i.e.
// per-row formats, where one vpdpbusd latency chain would bound the loop);
// without SPLIT a unit is exactly one block. Units whose blocks and groups
// are all complete take the FAST step (direct loads, no tail checks); the
// rest (row tail) the general one. Both do the same arithmetic, so the
// result does not depend on which step ran, on OB or on NR.
template <int BITS, int NR, int OB, bool SPLIT, int GPU>
inline void IdotTile(const Layout& L, const uint8_t* const* rows, const float* const* wss,
                     const IdotActs& a, int64_t r0, int64_t o0, const Out& out) {
  alignas(64) uint8_t tmp[OB][kBlockBytes];
  const __m512i mask = _mm512_set1_epi8(BITS == 4 ? 0x0F : 0x03);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const int8_t* xq[NR];
  const int32_t* cr[NR];
  const float* xsr[NR];
  for (int r = 0; r < NR; ++r) {
    xq[r] = a.q + (r0 + r) * L.idot_stride;
    cr[r] = a.c + (r0 + r) * a.lane_stride;
    xsr[r] = a.xs + (r0 + r) * a.lane_stride;
  }
  __m512 facc[OB][NR];
  for (int ob = 0; ob < OB; ++ob)
    for (int r = 0; r < NR; ++r) facc[ob][r] = _mm512_setzero_ps();

  auto step = [&](int64_t u, auto fast_tag) {
    constexpr bool kFast = decltype(fast_tag)::value;
    __m512i acc[OB][NR], acc2[OB][NR];
    for (int r = 0; r < NR; ++r) {
      const __m512i c = _mm512_loadu_si512(cr[r] + u * kLanes);
      for (int ob = 0; ob < OB; ++ob) {
        acc[ob][r] = c;
        if constexpr (SPLIT) acc2[ob][r] = _mm512_setzero_si512();
      }
    }
    auto block = [&](int64_t b) {
      __m512i wv[OB][BITS == 8 ? 1 : 8 / BITS];
      for (int ob = 0; ob < OB; ++ob) {
        const uint8_t* blk = kFast ? rows[ob] + b * kBlockBytes : BlockPtr(rows[ob], b, L.row_bytes, tmp[ob]);
        _mm_prefetch(reinterpret_cast<const char*>(rows[ob] + b * kBlockBytes + kPrefetchBytes), _MM_HINT_T0);
        const __m512i w = _mm512_loadu_si512(blk);
        if constexpr (BITS == 8) {
          wv[ob][0] = _mm512_xor_si512(w, flip);
        } else if constexpr (BITS == 4) {
          wv[ob][0] = _mm512_and_si512(w, mask);
          wv[ob][1] = _mm512_and_si512(_mm512_srli_epi16(w, 4), mask);
        } else {
          wv[ob][0] = _mm512_and_si512(w, mask);
          wv[ob][1] = _mm512_and_si512(_mm512_srli_epi16(w, 2), mask);
          wv[ob][2] = _mm512_and_si512(_mm512_srli_epi16(w, 4), mask);
          wv[ob][3] = _mm512_and_si512(_mm512_srli_epi16(w, 6), mask);
        }
      }
      for (int r = 0; r < NR; ++r) {
        if constexpr (BITS == 8) {
          const __m512i x = _mm512_loadu_si512(xq[r] + b * 64);
          for (int ob = 0; ob < OB; ++ob) {
            if constexpr (SPLIT) {
              if (b & 1) {
                acc2[ob][r] = _mm512_dpbusd_epi32(acc2[ob][r], wv[ob][0], x);
                continue;
              }
            }
            acc[ob][r] = _mm512_dpbusd_epi32(acc[ob][r], wv[ob][0], x);
          }
        } else if constexpr (BITS == 4) {
          const int8_t* xb = xq[r] + b * 128;
          const __m512i x0 = _mm512_loadu_si512(xb), x1 = _mm512_loadu_si512(xb + 64);
          for (int ob = 0; ob < OB; ++ob) {
            acc[ob][r] = _mm512_dpbusd_epi32(acc[ob][r], wv[ob][0], x0);
            if constexpr (SPLIT) {
              acc2[ob][r] = _mm512_dpbusd_epi32(acc2[ob][r], wv[ob][1], x1);
            } else {
              acc[ob][r] = _mm512_dpbusd_epi32(acc[ob][r], wv[ob][1], x1);
            }
          }
        } else {
          const int8_t* xb = xq[r] + b * 256;
          const __m512i x0 = _mm512_loadu_si512(xb), x1 = _mm512_loadu_si512(xb + 64);
          const __m512i x2 = _mm512_loadu_si512(xb + 128), x3 = _mm512_loadu_si512(xb + 192);
          for (int ob = 0; ob < OB; ++ob) {
            __m512i& second = SPLIT ? acc2[ob][r] : acc[ob][r];
            acc[ob][r] = _mm512_dpbusd_epi32(acc[ob][r], wv[ob][0], x0);
            second = _mm512_dpbusd_epi32(second, wv[ob][1], x1);
            acc[ob][r] = _mm512_dpbusd_epi32(acc[ob][r], wv[ob][2], x2);
            second = _mm512_dpbusd_epi32(second, wv[ob][3], x3);
          }
        }
      }
    };
    if constexpr (SPLIT) {
      const int64_t b0 = u * L.unit_blocks, b1 = std::min(L.nblocks, b0 + L.unit_blocks);
      for (int64_t b = b0; b < b1; ++b) block(b);
    } else {
      block(u);  // one block per unit
    }
    __m512 wl[OB];
    for (int ob = 0; ob < OB; ++ob) wl[ob] = kFast ? FastLanes<GPU>(wss[ob], u) : WeightLanes512(L, wss[ob], u);
    for (int r = 0; r < NR; ++r) {
      const __m512 xs = _mm512_loadu_ps(xsr[r] + u * kLanes);
      for (int ob = 0; ob < OB; ++ob) {
        const __m512i p = SPLIT ? _mm512_add_epi32(acc[ob][r], acc2[ob][r]) : acc[ob][r];
        const __m512 sc = _mm512_mul_ps(wl[ob], xs);
        facc[ob][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), sc, facc[ob][r]);
      }
    }
  };

  // Units whose blocks are all full (then their groups all exist too).
  int64_t fast = (L.row_bytes / kBlockBytes) / L.unit_blocks;
  if (!L.per_row) fast = std::min<int64_t>(fast, L.gpr / L.gpu);
  int64_t u = 0;
  for (; u < fast; ++u) step(u, std::true_type{});
  for (; u < L.nunits; ++u) step(u, std::false_type{});
  for (int ob = 0; ob < OB; ++ob)
    for (int r = 0; r < NR; ++r) Store(out, r0 + r, o0 + ob, Reduce(facc[ob][r]));
}

// The UB weight vectors of a complete unit of a grouped format (see
// kernel_impl.h): vector j = chunk j of each of the unit's 4 groups. GB = 16 *
// UB bytes per group; the gathers are 128-bit lane transposes (vshufi64x2),
// 2 per 64 bytes for UB >= 2, shared by every activation row.
template <int UB>
inline void GatherUnit(const uint8_t* base, __m512i* v) {
  auto ld = [&](int i) { return _mm512_loadu_si512(base + 64 * i); };
  auto transpose4 = [](__m512i b0, __m512i b1, __m512i b2, __m512i b3, __m512i* out) {
    const __m512i t0 = _mm512_shuffle_i64x2(b0, b1, 0x44), t1 = _mm512_shuffle_i64x2(b0, b1, 0xEE);
    const __m512i t2 = _mm512_shuffle_i64x2(b2, b3, 0x44), t3 = _mm512_shuffle_i64x2(b2, b3, 0xEE);
    out[0] = _mm512_shuffle_i64x2(t0, t2, 0x88);
    out[1] = _mm512_shuffle_i64x2(t0, t2, 0xDD);
    out[2] = _mm512_shuffle_i64x2(t1, t3, 0x88);
    out[3] = _mm512_shuffle_i64x2(t1, t3, 0xDD);
  };
  if constexpr (UB == 1) {
    v[0] = ld(0);
  } else if constexpr (UB == 2) {
    const __m512i b0 = ld(0), b1 = ld(1);
    v[0] = _mm512_shuffle_i64x2(b0, b1, 0x88);
    v[1] = _mm512_shuffle_i64x2(b0, b1, 0xDD);
  } else if constexpr (UB == 4) {
    transpose4(ld(0), ld(1), ld(2), ld(3), v);
  } else {
    transpose4(ld(0), ld(2), ld(4), ld(6), v);
    transpose4(ld(1), ld(3), ld(5), ld(7), v + 4);
  }
}

// 16-group units: vector 4c + d = dword d of chunk c of each group, lane p =
// group 4(p%4) + p/4: the chunk-c vectors of the 4 sub-units (4-group units,
// GatherUnit) transposed at 32-bit granularity inside each 128-bit lane.
template <int UBO>
inline void GatherWide(const uint8_t* base, int64_t gbytes, __m512i* v) {
  __m512i a[4][UBO];
  for (int i = 0; i < 4; ++i) GatherUnit<UBO>(base + i * 4 * gbytes, a[i]);
  for (int c = 0; c < UBO; ++c) {
    const __m512i t0 = _mm512_unpacklo_epi32(a[0][c], a[1][c]), t1 = _mm512_unpackhi_epi32(a[0][c], a[1][c]);
    const __m512i t2 = _mm512_unpacklo_epi32(a[2][c], a[3][c]), t3 = _mm512_unpackhi_epi32(a[2][c], a[3][c]);
    v[4 * c + 0] = _mm512_unpacklo_epi64(t0, t2);
    v[4 * c + 1] = _mm512_unpackhi_epi64(t0, t2);
    v[4 * c + 2] = _mm512_unpacklo_epi64(t1, t3);
    v[4 * c + 3] = _mm512_unpackhi_epi64(t1, t3);
  }
}
// Scale lanes of a complete 16-group unit: lane p = group 4(p%4) + p/4.
inline __m512 FastLanes16(const float* ws, int64_t u) {
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15),
                               _mm512_loadu_ps(ws + 16 * u));
}

// Grouped formats: OB weight rows x NR activation rows, one unit (4 groups,
// UB vectors) per step, one float epilogue per unit and row. Weight vectors
// are gathered and unpacked once for the NR rows; activation vectors, lane
// sums and scales are loaded once for the OB weight rows. Two int32 chains
// per row (even / odd vectors or planes) when fewer than 4 rows run side by
// side, to halve the vpdpbusd latency chain. Complete units (IdotFastUnits) gather directly; the last, partial
// unit goes through IdotVecCopy; both do the same arithmetic.
template <int BITS, int NR, int OB, int UB, bool WIDE>
inline void IdotGrp(const Layout& L, const uint8_t* const* rows, const float* const* wss,
                    const IdotActs& a, int64_t r0, int64_t o0, const Out& out) {
  constexpr int kPlanes = 8 / BITS;
  constexpr int64_t kVecElems = kBlockBytes * kPlanes;
  // Second int32 chain only when few (ob, r) chains run side by side.
  constexpr bool kSplit = NR * OB < 4;
  const __m512i mask = _mm512_set1_epi8(BITS == 4 ? 0x0F : 0x03);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const int8_t* xq[NR];
  const int32_t* cr[NR];
  const float* xsr[NR];
  for (int r = 0; r < NR; ++r) {
    xq[r] = a.q + (r0 + r) * L.idot_stride;
    cr[r] = a.c + (r0 + r) * a.lane_stride;
    xsr[r] = a.xs + (r0 + r) * a.lane_stride;
  }
  __m512 facc[OB][NR];
  for (int ob = 0; ob < OB; ++ob)
    for (int r = 0; r < NR; ++r) facc[ob][r] = _mm512_setzero_ps();

  auto step = [&](int64_t u, auto fast_tag) {
    constexpr bool kFast = decltype(fast_tag)::value;
    __m512i wv[OB][UB];
    for (int ob = 0; ob < OB; ++ob) {
      if constexpr (kFast) {
        const uint8_t* base = rows[ob] + u * L.unit_bytes;
        for (int i = 0; i < UB; ++i)
          _mm_prefetch(reinterpret_cast<const char*>(base + kPrefetchBytes + 64 * i), _MM_HINT_T0);
        if constexpr (WIDE) GatherWide<UB / 4>(base, L.gbytes, wv[ob]);
        else GatherUnit<UB>(base, wv[ob]);
      } else {
        alignas(64) uint8_t tmp[kBlockBytes];
        for (int j = 0; j < UB; ++j) {
          IdotVecCopy(L, rows[ob], u, j, tmp);
          wv[ob][j] = _mm512_load_si512(tmp);
        }
      }
    }
    __m512i acc[OB][NR], acc2[OB][NR];
    for (int r = 0; r < NR; ++r) {
      const __m512i c = _mm512_loadu_si512(cr[r] + u * kLanes);
      for (int ob = 0; ob < OB; ++ob) {
        acc[ob][r] = c;
        acc2[ob][r] = _mm512_setzero_si512();
      }
    }
    for (int j = 0; j < UB; ++j) {
      __m512i pl[OB][kPlanes];
      for (int ob = 0; ob < OB; ++ob) {
        if constexpr (BITS == 8) {
          pl[ob][0] = _mm512_xor_si512(wv[ob][j], flip);
        } else {
          for (int p = 0; p < kPlanes; ++p)
            pl[ob][p] = _mm512_and_si512(p == 0 ? wv[ob][j] : _mm512_srli_epi16(wv[ob][j], p * BITS), mask);
        }
      }
      const int64_t xo = (u * UB + j) * kVecElems;
      for (int r = 0; r < NR; ++r) {
        for (int p = 0; p < kPlanes; ++p) {
          const __m512i x = _mm512_loadu_si512(xq[r] + xo + p * kBlockBytes);
          for (int ob = 0; ob < OB; ++ob) {
            __m512i& dst = (kSplit && (UB > 1 ? (j & 1) : (p & 1))) ? acc2[ob][r] : acc[ob][r];
            dst = _mm512_dpbusd_epi32(dst, pl[ob][p], x);
          }
        }
      }
    }
    __m512 wl[OB];
    for (int ob = 0; ob < OB; ++ob) {
      if constexpr (!kFast) wl[ob] = WeightLanes512(L, wss[ob], u);
      else if constexpr (WIDE) wl[ob] = FastLanes16(wss[ob], u);
      else wl[ob] = FastLanes<4>(wss[ob], u);
    }
    for (int r = 0; r < NR; ++r) {
      const __m512 xs = _mm512_loadu_ps(xsr[r] + u * kLanes);
      for (int ob = 0; ob < OB; ++ob) {
        const __m512i p = kSplit ? _mm512_add_epi32(acc[ob][r], acc2[ob][r]) : acc[ob][r];
        const __m512 sc = _mm512_mul_ps(wl[ob], xs);
        facc[ob][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), sc, facc[ob][r]);
      }
    }
  };

  const int64_t fast = IdotFastUnits(L);
  int64_t u = 0;
  for (; u < fast; ++u) step(u, std::true_type{});
  for (; u < L.nunits; ++u) step(u, std::false_type{});
  for (int ob = 0; ob < OB; ++ob)
    for (int r = 0; r < NR; ++r) Store(out, r0 + r, o0 + ob, Reduce(facc[ob][r]));
}

// All S activation rows against weight rows [o, o + OB): UB = 0 per-row
// formats (IdotTile), else grouped (IdotGrp).
template <int BITS, int OB, int UB, bool WIDE>
inline void IdotRows(const Layout& L, const QMatrix& w, const IdotActs& a, int64_t s, int64_t o,
                     const Out& out) {
  const uint8_t* rows[OB];
  const float* wss[OB];
  for (int ob = 0; ob < OB; ++ob) {
    rows[ob] = w.data + (o + ob) * L.row_bytes;
    wss[ob] = w.scales + (o + ob) * L.gpr;
  }
  auto tile = [&](auto nr_tag, int64_t r) {
    constexpr int kNR = decltype(nr_tag)::value;
    if constexpr (UB == 0) IdotTile<BITS, kNR, OB, true, 0>(L, rows, wss, a, r, o, out);
    else IdotGrp<BITS, kNR, OB, UB, WIDE>(L, rows, wss, a, r, o, out);
  };
  int64_t r = 0;
  for (; r + 4 <= s; r += 4) tile(std::integral_constant<int, 4>{}, r);
  switch (s - r) {
    case 3: tile(std::integral_constant<int, 3>{}, r); break;
    case 2: tile(std::integral_constant<int, 2>{}, r); break;
    case 1: tile(std::integral_constant<int, 1>{}, r); break;
    default: break;
  }
}

template <int BITS, int UB, bool WIDE = false>
void IdotImpl(const Layout& L, const QMatrix& w, const IdotActs& a, int64_t s, int64_t o0,
              int64_t o1, const Out& out) {
  // Weight rows per pass: 2 halved the activation loads when units were 1-2
  // vectors (+2-3 % measured); with >= 4 vectors per unit and weight row a
  // second row no longer fits the 32 registers, so 1. (IdotGrp / IdotTile
  // keep OB as a parameter.)
  constexpr int kOB = 1;
  int64_t o = o0;
  for (; o + kOB <= o1; o += kOB) IdotRows<BITS, kOB, UB, WIDE>(L, w, a, s, o, out);
  for (; o < o1; ++o) IdotRows<BITS, 1, UB, WIDE>(L, w, a, s, o, out);
}

template <int BITS>
void IdotBits(const Layout& L, const QMatrix& w, const IdotActs& a, int64_t s, int64_t o0,
              int64_t o1, const Out& out) {
  if (L.per_row) return IdotImpl<BITS, 0>(L, w, a, s, o0, o1, out);
  if (L.wide) {
    if (L.unit_blocks == 4) return IdotImpl<BITS, 4, true>(L, w, a, s, o0, o1, out);
    return IdotImpl<BITS, 8, true>(L, w, a, s, o0, o1, out);
  }
  // 4-group units exist for group bytes 64 (4 vectors) and 128 (8 vectors).
  if (L.unit_blocks == 4) return IdotImpl<BITS, 4>(L, w, a, s, o0, o1, out);
  return IdotImpl<BITS, 8>(L, w, a, s, o0, o1, out);
}

void Idot(const Layout& L, const QMatrix& w, const IdotActs& a, int64_t s, int64_t o0, int64_t o1,
          const Out& out) {
  switch (L.bits) {
    case 8: return IdotBits<8>(L, w, a, s, o0, o1, out);
    case 4: return IdotBits<4>(L, w, a, s, o0, o1, out);
    default: return IdotBits<2>(L, w, a, s, o0, o1, out);
  }
}

// ---- float path: dequantize 16 codes at a time, f32 FMA, 4 accumulators ----
template <int BITS, int NR>
inline void FloatRow(const Layout& L, const uint8_t* row, const float* ws, const FloatActs& a,
                     int64_t r0, int64_t o, const Out& out) {
  alignas(64) uint8_t tmp[kBlockBytes];
  const float* xr[NR];
  for (int r = 0; r < NR; ++r) xr[r] = a.x + (r0 + r) * L.act_stride;
  __m512 acc[NR][4];
  for (int r = 0; r < NR; ++r)
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < L.nblocks; ++b) {
    const uint8_t* blk = BlockPtr(row, b, L.row_bytes, tmp);
    if constexpr (BITS == 32) {
      const __m512 wv = _mm512_loadu_ps(reinterpret_cast<const float*>(blk));
      for (int r = 0; r < NR; ++r)
        acc[r][b & 3] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(xr[r] + b * 16), acc[r][b & 3]);
    } else if constexpr (BITS == 16) {
      for (int h = 0; h < 2; ++h) {
        const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32 * h)));
        const __m512 wv = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
        for (int r = 0; r < NR; ++r)
          acc[r][h] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(xr[r] + b * 32 + 16 * h), acc[r][h]);
      }
    } else {
      for (int j = 0; j < 4; ++j) {
        const __m512 wsv = _mm512_set1_ps(ws[ChunkGroup(L, b, j)]);
        const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * j));
        if constexpr (BITS == 8) {
          const __m512 wv = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(raw)), wsv);
          for (int r = 0; r < NR; ++r)
            acc[r][j] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(xr[r] + b * 64 + 16 * j), acc[r][j]);
        } else {
          const __m512i v = _mm512_cvtepu8_epi32(raw);
          constexpr int kPlanes = 8 / BITS;
          for (int p = 0; p < kPlanes; ++p) {
            const __m512i code = _mm512_and_si512(_mm512_srli_epi32(v, p * BITS), _mm512_set1_epi32((1 << BITS) - 1));
            const __m512 q = _mm512_cvtepi32_ps(_mm512_sub_epi32(code, _mm512_set1_epi32(1 << (BITS - 1))));
            const __m512 wv = _mm512_mul_ps(q, wsv);
            for (int r = 0; r < NR; ++r)
              acc[r][j] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(xr[r] + b * L.block_elems + p * 64 + 16 * j), acc[r][j]);
          }
        }
      }
    }
  }
  for (int r = 0; r < NR; ++r) {
    const __m512 t = _mm512_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]), _mm512_add_ps(acc[r][2], acc[r][3]));
    Store(out, r0 + r, o, Reduce(t));
  }
}

template <int BITS>
void FloatImpl(const Layout& L, const QMatrix& w, const FloatActs& a, int64_t s, int64_t o0,
               int64_t o1, const Out& out) {
  for (int64_t o = o0; o < o1; ++o) {
    const uint8_t* row = w.data + o * L.row_bytes;
    const float* ws = w.scales == nullptr ? nullptr : w.scales + o * L.gpr;
    int64_t r = 0;
    for (; r + 4 <= s; r += 4) FloatRow<BITS, 4>(L, row, ws, a, r, o, out);
    switch (s - r) {
      case 3: FloatRow<BITS, 3>(L, row, ws, a, r, o, out); break;
      case 2: FloatRow<BITS, 2>(L, row, ws, a, r, o, out); break;
      case 1: FloatRow<BITS, 1>(L, row, ws, a, r, o, out); break;
      default: break;
    }
  }
}

void Fdot(const Layout& L, const QMatrix& w, const FloatActs& a, int64_t s, int64_t o0, int64_t o1,
          const Out& out) {
  switch (L.bits) {
    case 32: return FloatImpl<32>(L, w, a, s, o0, o1, out);
    case 16: return FloatImpl<16>(L, w, a, s, o0, o1, out);
    case 8: return FloatImpl<8>(L, w, a, s, o0, o1, out);
    case 4: return FloatImpl<4>(L, w, a, s, o0, o1, out);
    default: return FloatImpl<2>(L, w, a, s, o0, o1, out);
  }
}

int64_t Peak(int64_t iters) {
  constexpr int kChains = 12;  // > latency x throughput of vpdpbusd
  __m512i acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_epi32(i);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-5);
  for (int64_t n = 0; n < iters; ++n) {
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
    __asm__ volatile("" : "+v"(acc[0]), "+v"(acc[5]), "+v"(acc[11]));
  }
  __m512i t = acc[0];
  for (int i = 1; i < kChains; ++i) t = _mm512_add_epi32(t, acc[i]);
  volatile int sink = _mm512_reduce_add_epi32(t);
  (void)sink;
  return iters * kChains * 64;
}

}  // namespace

const IsaTable& Avx512Table() {
  static constexpr IsaTable kTable = {Idot, Fdot, Peak};
  return kTable;
}

}  // namespace moe::kernels::internal
