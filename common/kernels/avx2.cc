// AVX2 kernels (AVX2 + FMA + F16C). Compiled with these flags only in this
// file; reached through the dispatcher after CPUID + XCR0 checks.
//
// IDOT uses vpmaddubsw (u8 x s8 -> pairs summed into SATURATING int16) then
// vpmaddwd with ones (int16 pairs -> exact int32). Why no int16 saturates:
//   activations are quantized to [-127, 127] (never -128, see prep.cc);
//   q4: unsigned codes 0..15: |pair| <= 2*15*127 = 3810; lo + hi planes are
//       added in int16 first: <= 7620.
//   q2: codes 0..3: |pair| <= 2*3*127 = 762; four planes summed: <= 3048.
//   q8: the sign trick: |w| in 0..128 as unsigned, sign(x, w) in [-127, 127]
//       (no wrap since x != -128): |pair| <= 2*128*127 = 32512 <= 32767.
//       (Biasing w by +128 instead would give 2*255*127 = 64770: overflow.)
// Test KernelsIdotTest.Avx2NoSaturationAtExtremes drives every bound to its maximum
// and checks bit-exactness against the scalar reference.
#include <immintrin.h>

#include <algorithm>
#include <type_traits>

#include "common/kernels/kernel_impl.h"

namespace moe::kernels::internal {
namespace {

// Canonical Reduce16 on lanes 0-7 (lo) and 8-15 (hi).
inline float Reduce(__m256 lo, __m256 hi) {
  const __m256 b = _mm256_add_ps(lo, hi);
  const __m128 c = _mm_add_ps(_mm256_castps256_ps128(b), _mm256_extractf128_ps(b, 1));
  const __m128 d = _mm_add_ps(c, _mm_movehl_ps(c, c));
  return _mm_cvtss_f32(_mm_add_ss(d, _mm_shuffle_ps(d, d, 1)));
}

inline void WeightLanes256(const Layout& L, const float* ws, int64_t u, __m256* lo, __m256* hi) {
  if (L.per_row) {
    *lo = *hi = _mm256_set1_ps(ws[0]);
    return;
  }
  if (!UnitComplete(L, u) || L.gpu == 16) {
    alignas(32) float t[kLanes];
    WeightLanes(L, ws, u, t);
    *lo = _mm256_load_ps(t);
    *hi = _mm256_load_ps(t + 8);
    return;
  }
  const float* p = ws + u * L.gpu;
  if (L.gpu == 1) {
    *lo = *hi = _mm256_set1_ps(p[0]);
  } else if (L.gpu == 2) {
    *lo = _mm256_set1_ps(p[0]);
    *hi = _mm256_set1_ps(p[1]);
  } else {
    const __m256 v = _mm256_castps128_ps256(_mm_loadu_ps(p));
    *lo = _mm256_permutevar8x32_ps(v, _mm256_set_epi32(1, 1, 1, 1, 0, 0, 0, 0));
    *hi = _mm256_permutevar8x32_ps(v, _mm256_set_epi32(3, 3, 3, 3, 2, 2, 2, 2));
  }
}

// Software prefetch distance for the weight stream (as in avx512.cc).
inline constexpr int64_t kPrefetchBytes = 2048;

inline __m256i Load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Weight-scale lanes of a unit whose groups all exist; GPU = groups per unit
// (0 = per-row scale), a template constant so the hot loop has no branches.
template <int GPU>
inline void FastLanes256(const float* ws, int64_t u, __m256* lo, __m256* hi) {
  if constexpr (GPU == 0) {
    *lo = *hi = _mm256_set1_ps(ws[0]);
  } else if constexpr (GPU == 1) {
    *lo = *hi = _mm256_set1_ps(ws[u]);
  } else if constexpr (GPU == 2) {
    *lo = _mm256_set1_ps(ws[2 * u]);
    *hi = _mm256_set1_ps(ws[2 * u + 1]);
  } else if constexpr (GPU == 16) {  // lane p = group 4(p%4) + p/4
    *lo = _mm256_i32gather_ps(ws + 16 * u, _mm256_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13), 4);
    *hi = _mm256_i32gather_ps(ws + 16 * u, _mm256_setr_epi32(2, 6, 10, 14, 3, 7, 11, 15), 4);
  } else {
    const __m256 v = _mm256_castps128_ps256(_mm_loadu_ps(ws + 4 * u));
    *lo = _mm256_permutevar8x32_ps(v, _mm256_set_epi32(1, 1, 1, 1, 0, 0, 0, 0));
    *hi = _mm256_permutevar8x32_ps(v, _mm256_set_epi32(3, 3, 3, 3, 2, 2, 2, 2));
  }
}

// One weight row against NR activation rows (one weight load + unpack feeds
// NR rows). MULTI: units of several blocks (per-row formats, q8_g128);
// otherwise a unit is exactly one block. Units whose blocks and groups are
// all complete take the FAST step (direct loads, template scale lanes); the
// row tail the general one; both do the same arithmetic.
template <int BITS, int NR, bool MULTI, int GPU>
inline void IdotRow(const Layout& L, const uint8_t* row, const float* ws, const IdotActs& a,
                    int64_t r0, int64_t o, const Out& out) {
  alignas(64) uint8_t tmp[kBlockBytes];
  const __m256i mask = _mm256_set1_epi8(BITS == 4 ? 0x0F : 0x03);
  const __m256i ones = _mm256_set1_epi16(1);
  const int8_t* xq[NR];
  for (int r = 0; r < NR; ++r) xq[r] = a.q + (r0 + r) * L.idot_stride;
  __m256 facc[NR][2];
  for (int r = 0; r < NR; ++r) facc[r][0] = facc[r][1] = _mm256_setzero_ps();
  auto step = [&](int64_t u, auto fast_tag) {
    constexpr bool kFast = decltype(fast_tag)::value;
    __m256i acc[NR][2];
    for (int r = 0; r < NR; ++r) {
      if constexpr (BITS == 8) {  // the sign trick needs no bias correction
        acc[r][0] = acc[r][1] = _mm256_setzero_si256();
      } else {
        const int32_t* c = a.c + (r0 + r) * a.lane_stride + u * kLanes;
        acc[r][0] = Load(c);
        acc[r][1] = Load(c + 8);
      }
    }
    auto block = [&](int64_t b) {
      const uint8_t* blk = kFast ? row + b * kBlockBytes : BlockPtr(row, b, L.row_bytes, tmp);
      _mm_prefetch(reinterpret_cast<const char*>(row + b * kBlockBytes + kPrefetchBytes), _MM_HINT_T0);
      for (int h = 0; h < 2; ++h) {
        const __m256i w = Load(blk + 32 * h);
        if constexpr (BITS == 8) {
          const __m256i aw = _mm256_abs_epi8(w);
          for (int r = 0; r < NR; ++r) {
            const __m256i sx = _mm256_sign_epi8(Load(xq[r] + b * 64 + 32 * h), w);
            const __m256i p = _mm256_maddubs_epi16(aw, sx);
            acc[r][h] = _mm256_add_epi32(acc[r][h], _mm256_madd_epi16(p, ones));
          }
        } else if constexpr (BITS == 4) {
          const __m256i lo = _mm256_and_si256(w, mask);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), mask);
          for (int r = 0; r < NR; ++r) {
            const int8_t* xb = xq[r] + b * 128 + 32 * h;
            const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, Load(xb)),
                                               _mm256_maddubs_epi16(hi, Load(xb + 64)));
            acc[r][h] = _mm256_add_epi32(acc[r][h], _mm256_madd_epi16(p, ones));
          }
        } else {
          const __m256i c0 = _mm256_and_si256(w, mask);
          const __m256i c1 = _mm256_and_si256(_mm256_srli_epi16(w, 2), mask);
          const __m256i c2 = _mm256_and_si256(_mm256_srli_epi16(w, 4), mask);
          const __m256i c3 = _mm256_and_si256(_mm256_srli_epi16(w, 6), mask);
          for (int r = 0; r < NR; ++r) {
            const int8_t* xb = xq[r] + b * 256 + 32 * h;
            const __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(c0, Load(xb)),
                                                 _mm256_maddubs_epi16(c1, Load(xb + 64)));
            const __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(c2, Load(xb + 128)),
                                                 _mm256_maddubs_epi16(c3, Load(xb + 192)));
            acc[r][h] = _mm256_add_epi32(acc[r][h], _mm256_madd_epi16(_mm256_add_epi16(p01, p23), ones));
          }
        }
      }
    };
    if constexpr (MULTI) {
      const int64_t b0 = u * L.unit_blocks, b1 = std::min(L.nblocks, b0 + L.unit_blocks);
      for (int64_t b = b0; b < b1; ++b) block(b);
    } else {
      block(u);
    }
    __m256 wl[2];
    if constexpr (kFast) FastLanes256<GPU>(ws, u, &wl[0], &wl[1]);
    else WeightLanes256(L, ws, u, &wl[0], &wl[1]);
    for (int r = 0; r < NR; ++r) {
      const float* xs = a.xs + (r0 + r) * a.lane_stride + u * kLanes;
      for (int h = 0; h < 2; ++h) {
        const __m256 sc = _mm256_mul_ps(wl[h], _mm256_loadu_ps(xs + 8 * h));
        facc[r][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r][h]), sc, facc[r][h]);
      }
    }
  };
  int64_t fast = (L.row_bytes / kBlockBytes) / L.unit_blocks;
  if (!L.per_row) fast = std::min<int64_t>(fast, L.gpr / L.gpu);
  int64_t u = 0;
  for (; u < fast; ++u) step(u, std::true_type{});
  for (; u < L.nunits; ++u) step(u, std::false_type{});
  for (int r = 0; r < NR; ++r) Store(out, r0 + r, o, Reduce(facc[r][0], facc[r][1]));
}

// Grouped formats: one weight row x NR activation rows, one unit (4 groups,
// UB vectors of 64 bytes) per step, one float epilogue per unit and row (see
// kernel_impl.h). Half h of vector j = chunk j of groups 2h and 2h+1: two
// 16-byte loads (one 32-byte load when UB = 1, where the chunks are adjacent).
template <int BITS, int NR, int UB, bool WIDE>
inline void IdotGrp(const Layout& L, const uint8_t* row, const float* ws, const IdotActs& a,
                    int64_t r0, int64_t o, const Out& out) {
  constexpr int64_t kVecElems = kBlockBytes * 8 / BITS;
  const __m256i mask = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  const int8_t* xq[NR];
  for (int r = 0; r < NR; ++r) xq[r] = a.q + (r0 + r) * L.idot_stride;
  __m256 facc[NR][2];
  for (int r = 0; r < NR; ++r) facc[r][0] = facc[r][1] = _mm256_setzero_ps();
  auto step = [&](int64_t u, auto fast_tag) {
    constexpr bool kFast = decltype(fast_tag)::value;
    __m256i acc[NR][2];
    for (int r = 0; r < NR; ++r) {
      if constexpr (BITS == 8) {  // the sign trick needs no bias correction
        acc[r][0] = acc[r][1] = _mm256_setzero_si256();
      } else {
        const int32_t* c = a.c + (r0 + r) * a.lane_stride + u * kLanes;
        acc[r][0] = Load(c);
        acc[r][1] = Load(c + 8);
      }
    }
    const uint8_t* base = row + u * L.unit_bytes;
    if constexpr (kFast)
      for (int i = 0; i < UB; ++i)
        _mm_prefetch(reinterpret_cast<const char*>(base + kPrefetchBytes + 64 * i), _MM_HINT_T0);
    alignas(64) uint8_t tmp[kBlockBytes];
    // Half h of vector c of the 4-group unit at b (UBO vectors per unit).
    constexpr int kUBO = WIDE ? UB / 4 : UB;
    auto half4 = [&](const uint8_t* b, int c, int h) {
      if constexpr (kUBO == 1) {
        return Load(b + 32 * h);
      } else {
        const uint8_t* p0 = b + 2 * h * L.gbytes + 16 * c;
        return _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p0))),
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(p0 + L.gbytes)), 1);
      }
    };
    // Multiply-accumulate of half h of vector j (32 weight bytes w) into every row.
    auto mac = [&](__m256i w, int j, int h) {
        const int64_t xo = (u * UB + j) * kVecElems + 32 * h;
        if constexpr (BITS == 8) {
          const __m256i aw = _mm256_abs_epi8(w);
          for (int r = 0; r < NR; ++r) {
            const __m256i sx = _mm256_sign_epi8(Load(xq[r] + xo), w);
            acc[r][h] = _mm256_add_epi32(acc[r][h], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), ones));
          }
        } else {
          const __m256i lo = _mm256_and_si256(w, mask);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), mask);
          for (int r = 0; r < NR; ++r) {
            const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, Load(xq[r] + xo)),
                                               _mm256_maddubs_epi16(hi, Load(xq[r] + xo + 64)));
            acc[r][h] = _mm256_add_epi32(acc[r][h], _mm256_madd_epi16(p, ones));
          }
        }
    };
    if constexpr (kFast && WIDE) {
      // 16-group units: per chunk c and half h, a 32-bit transpose (inside
      // each 128-bit lane) of half h of chunk c of the 4 sub-units gives
      // half h of vectors 4c..4c+3.
      for (int c = 0; c < kUBO; ++c)
        for (int h = 0; h < 2; ++h) {
          __m256i q[4];
          for (int i = 0; i < 4; ++i) q[i] = half4(base + i * 4 * L.gbytes, c, h);
          const __m256i t0 = _mm256_unpacklo_epi32(q[0], q[1]), t1 = _mm256_unpackhi_epi32(q[0], q[1]);
          const __m256i t2 = _mm256_unpacklo_epi32(q[2], q[3]), t3 = _mm256_unpackhi_epi32(q[2], q[3]);
          mac(_mm256_unpacklo_epi64(t0, t2), 4 * c + 0, h);
          mac(_mm256_unpackhi_epi64(t0, t2), 4 * c + 1, h);
          mac(_mm256_unpacklo_epi64(t1, t3), 4 * c + 2, h);
          mac(_mm256_unpackhi_epi64(t1, t3), 4 * c + 3, h);
        }
    } else {
      for (int j = 0; j < UB; ++j) {
        if constexpr (!kFast) IdotVecCopy(L, row, u, j, tmp);
        for (int h = 0; h < 2; ++h) {
          if constexpr (!kFast) mac(Load(tmp + 32 * h), j, h);
          else mac(half4(base, j, h), j, h);
        }
      }
    }
    __m256 wl[2];
    if constexpr (kFast) FastLanes256<WIDE ? 16 : 4>(ws, u, &wl[0], &wl[1]);
    else WeightLanes256(L, ws, u, &wl[0], &wl[1]);
    for (int r = 0; r < NR; ++r) {
      const float* xs = a.xs + (r0 + r) * a.lane_stride + u * kLanes;
      for (int h = 0; h < 2; ++h) {
        const __m256 sc = _mm256_mul_ps(wl[h], _mm256_loadu_ps(xs + 8 * h));
        facc[r][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r][h]), sc, facc[r][h]);
      }
    }
  };
  const int64_t fast = IdotFastUnits(L);
  int64_t u = 0;
  for (; u < fast; ++u) step(u, std::true_type{});
  for (; u < L.nunits; ++u) step(u, std::false_type{});
  for (int r = 0; r < NR; ++r) Store(out, r0 + r, o, Reduce(facc[r][0], facc[r][1]));
}

// 16 ymm registers: two activation rows per pass (acc + facc = 8 registers,
// plus the unpacked weights and constants) so nothing spills. UB = 0:
// per-row formats (IdotRow), else grouped (IdotGrp).
template <int BITS, int UB, bool WIDE = false>
void IdotImpl(const Layout& L, const QMatrix& w, const IdotActs& a, int64_t s, int64_t o0,
              int64_t o1, const Out& out) {
  for (int64_t o = o0; o < o1; ++o) {
    const uint8_t* row = w.data + o * L.row_bytes;
    const float* ws = w.scales + o * L.gpr;
    int64_t r = 0;
    if constexpr (UB == 0) {
      for (; r + 2 <= s; r += 2) IdotRow<BITS, 2, true, 0>(L, row, ws, a, r, o, out);
      if (r < s) IdotRow<BITS, 1, true, 0>(L, row, ws, a, r, o, out);
    } else {
      for (; r + 2 <= s; r += 2) IdotGrp<BITS, 2, UB, WIDE>(L, row, ws, a, r, o, out);
      if (r < s) IdotGrp<BITS, 1, UB, WIDE>(L, row, ws, a, r, o, out);
    }
  }
}

template <int BITS>
void IdotBits(const Layout& L, const QMatrix& w, const IdotActs& a, int64_t s, int64_t o0,
              int64_t o1, const Out& out) {
  if (L.per_row) return IdotImpl<BITS, 0>(L, w, a, s, o0, o1, out);
  if constexpr (BITS == 2) {
    return;  // no grouped int2 format
  } else {
    if (L.wide) {
      if (L.unit_blocks == 4) return IdotImpl<BITS, 4, true>(L, w, a, s, o0, o1, out);
      return IdotImpl<BITS, 8, true>(L, w, a, s, o0, o1, out);
    }
    // 4-group units exist for group bytes 64 (4 vectors) and 128 (8 vectors).
    if (L.unit_blocks == 4) return IdotImpl<BITS, 4>(L, w, a, s, o0, o1, out);
    return IdotImpl<BITS, 8>(L, w, a, s, o0, o1, out);
  }
}

void Idot(const Layout& L, const QMatrix& w, const IdotActs& a, int64_t s, int64_t o0, int64_t o1,
          const Out& out) {
  switch (L.bits) {
    case 8: return IdotBits<8>(L, w, a, s, o0, o1, out);
    case 4: return IdotBits<4>(L, w, a, s, o0, o1, out);
    default: return IdotBits<2>(L, w, a, s, o0, o1, out);
  }
}

// ---- float path: dequantize 8 codes at a time, f32 FMA, 4 accumulators ----
template <int BITS, int NR>
inline void FloatRow(const Layout& L, const uint8_t* row, const float* ws, const FloatActs& a,
                     int64_t r0, int64_t o, const Out& out) {
  alignas(64) uint8_t tmp[kBlockBytes];
  const float* xr[NR];
  for (int r = 0; r < NR; ++r) xr[r] = a.x + (r0 + r) * L.act_stride;
  __m256 acc[NR][4];
  for (int r = 0; r < NR; ++r)
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < L.nblocks; ++b) {
    const uint8_t* blk = BlockPtr(row, b, L.row_bytes, tmp);
    if constexpr (BITS == 32) {
      for (int h = 0; h < 2; ++h) {
        const __m256 wv = _mm256_loadu_ps(reinterpret_cast<const float*>(blk) + 8 * h);
        for (int r = 0; r < NR; ++r)
          acc[r][h] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xr[r] + b * 16 + 8 * h), acc[r][h]);
      }
    } else if constexpr (BITS == 16) {
      for (int h = 0; h < 4; ++h) {
        const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * h)));
        const __m256 wv = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
        for (int r = 0; r < NR; ++r)
          acc[r][h] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xr[r] + b * 32 + 8 * h), acc[r][h]);
      }
    } else {
      for (int j = 0; j < 4; ++j) {
        const __m256 wsv = _mm256_set1_ps(ws[ChunkGroup(L, b, j)]);
        for (int h = 0; h < 2; ++h) {
          const __m128i raw = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 16 * j + 8 * h));
          const int64_t xo = b * L.block_elems + 16 * j + 8 * h;
          if constexpr (BITS == 8) {
            const __m256 wv = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(raw)), wsv);
            for (int r = 0; r < NR; ++r)
              acc[r][j] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xr[r] + xo), acc[r][j]);
          } else {
            const __m256i v = _mm256_cvtepu8_epi32(raw);
            constexpr int kPlanes = 8 / BITS;
            for (int p = 0; p < kPlanes; ++p) {
              const __m256i code = _mm256_and_si256(_mm256_srli_epi32(v, p * BITS), _mm256_set1_epi32((1 << BITS) - 1));
              const __m256 q = _mm256_cvtepi32_ps(_mm256_sub_epi32(code, _mm256_set1_epi32(1 << (BITS - 1))));
              const __m256 wv = _mm256_mul_ps(q, wsv);
              for (int r = 0; r < NR; ++r)
                acc[r][j] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xr[r] + xo + p * 64), acc[r][j]);
            }
          }
        }
      }
    }
  }
  for (int r = 0; r < NR; ++r) {
    const __m256 t = _mm256_add_ps(_mm256_add_ps(acc[r][0], acc[r][1]), _mm256_add_ps(acc[r][2], acc[r][3]));
    Store(out, r0 + r, o, Reduce(t, _mm256_setzero_ps()));
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
  constexpr int kChains = 8;
  __m256i acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_epi32(i);
  const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-5), ones = _mm256_set1_epi16(1);
  for (int64_t n = 0; n < iters; ++n) {
    for (int i = 0; i < kChains; ++i)
      acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
    __asm__ volatile("" : "+x"(acc[0]), "+x"(acc[3]), "+x"(acc[7]));
  }
  __m256i t = acc[0];
  for (int i = 1; i < kChains; ++i) t = _mm256_add_epi32(t, acc[i]);
  volatile int sink = _mm256_extract_epi32(t, 0);
  (void)sink;
  return iters * kChains * 32;
}

}  // namespace

const IsaTable& Avx2Table() {
  static constexpr IsaTable kTable = {Idot, Fdot, Peak};
  return kTable;
}

}  // namespace moe::kernels::internal
