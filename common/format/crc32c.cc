#include "common/format/crc32c.h"

#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace moe::crc32c {
namespace {

struct Table {
  uint32_t t[8][256];
  Table() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
    }
  }
};

uint32_t Crc32cTable(uint32_t crc, const uint8_t* p, size_t n) {
  static const Table tab;
  const auto& t = tab.t;
  crc = ~crc;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    v ^= crc;
    crc = t[7][v & 0xff] ^ t[6][(v >> 8) & 0xff] ^ t[5][(v >> 16) & 0xff] ^ t[4][(v >> 24) & 0xff] ^
          t[3][(v >> 32) & 0xff] ^ t[2][(v >> 40) & 0xff] ^ t[1][(v >> 48) & 0xff] ^ t[0][v >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xff];
  return ~crc;
}

#if defined(__x86_64__)
// Shift a CRC over `len` zero bytes (GF(2) matrix method, computed once per
// block size) so three independent streams can be combined.
uint32_t Gf2MatTimes(const uint32_t* mat, uint32_t vec) {
  uint32_t sum = 0;
  for (int i = 0; vec; ++i, vec >>= 1) {
    if (vec & 1) sum ^= mat[i];
  }
  return sum;
}
void Gf2MatSquare(uint32_t* sq, const uint32_t* mat) {
  for (int n = 0; n < 32; ++n) sq[n] = Gf2MatTimes(mat, mat[n]);
}
struct ShiftOp {
  uint32_t m[32];  // operator: crc -> crc extended by `len` zero bytes (raw, unconditioned)
  explicit ShiftOp(size_t len) {
    uint32_t odd[32], even[32];
    odd[0] = 0x82f63b78u;
    uint32_t row = 1;
    for (int n = 1; n < 32; ++n) {
      odd[n] = row;
      row <<= 1;
    }
    Gf2MatSquare(even, odd);  // 2 zero bits
    Gf2MatSquare(odd, even);  // 4 zero bits
    // identity
    for (int n = 0; n < 32; ++n) m[n] = 1u << n;
    // len bytes = 8*len bits; apply by squaring.
    size_t bits = len;
    // odd now = 4 bits; square to get 8 bits (1 byte)
    uint32_t* a = even;
    uint32_t* b = odd;
    Gf2MatSquare(a, b);  // a = 8 bits = 1 byte
    while (bits) {
      if (bits & 1) {
        uint32_t r[32];
        for (int n = 0; n < 32; ++n) r[n] = Gf2MatTimes(a, m[n]);
        std::memcpy(m, r, sizeof(r));
      }
      bits >>= 1;
      if (!bits) break;
      Gf2MatSquare(b, a);
      uint32_t* t = a;
      a = b;
      b = t;
    }
  }
  uint32_t Apply(uint32_t crc) const { return Gf2MatTimes(m, crc); }
};

constexpr size_t kBlock = 8192;  // bytes per stream per round

__attribute__((target("sse4.2"))) uint32_t Crc32cHw(uint32_t crc, const uint8_t* p, size_t n) {
  static const ShiftOp shift(kBlock);
  uint64_t c0 = ~crc;
  while (n >= 3 * kBlock) {
    uint64_t c1 = 0, c2 = 0;
    const uint8_t* p1 = p + kBlock;
    const uint8_t* p2 = p + 2 * kBlock;
    for (size_t i = 0; i < kBlock; i += 8) {
      uint64_t a, b, c;
      std::memcpy(&a, p + i, 8);
      std::memcpy(&b, p1 + i, 8);
      std::memcpy(&c, p2 + i, 8);
      c0 = _mm_crc32_u64(c0, a);
      c1 = _mm_crc32_u64(c1, b);
      c2 = _mm_crc32_u64(c2, c);
    }
    uint32_t r = shift.Apply(static_cast<uint32_t>(c0)) ^ static_cast<uint32_t>(c1);
    r = shift.Apply(r) ^ static_cast<uint32_t>(c2);
    c0 = r;
    p += 3 * kBlock;
    n -= 3 * kBlock;
  }
  while (n >= 8) {
    uint64_t a;
    std::memcpy(&a, p, 8);
    c0 = _mm_crc32_u64(c0, a);
    p += 8;
    n -= 8;
  }
  uint32_t c = static_cast<uint32_t>(c0);
  while (n--) c = _mm_crc32_u8(c, *p++);
  return ~c;
}
#endif

}  // namespace

uint32_t Extend(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
#if defined(__x86_64__)
  static const bool hw = __builtin_cpu_supports("sse4.2");
  if (hw) return Crc32cHw(crc, p, n);
#endif
  return Crc32cTable(crc, p, n);
}

}  // namespace moe::crc32c
