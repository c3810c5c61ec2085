#include "common/format/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace moe {
namespace {

uint32_t BitwiseCrc(const uint8_t* p, size_t n) {
  uint32_t c = ~0u;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
  }
  return ~c;
}

TEST(Crc32c, KnownVector) { EXPECT_EQ(crc32c::Extend(0, "123456789", 9), 0xe3069283u); }

TEST(Crc32c, MatchesBitwiseReferenceAtAllSizesAndSplits) {
  std::mt19937 rng(5);
  std::vector<uint8_t> buf(3 * 8192 * 2 + 1000);
  for (auto& b : buf) b = rng();
  for (size_t n : {0ul, 1ul, 7ul, 8ul, 100ul, 24575ul, 24576ul, 24577ul, 50000ul, buf.size()}) {
    uint32_t ref = BitwiseCrc(buf.data(), n);
    EXPECT_EQ(crc32c::Extend(0, buf.data(), n), ref) << n;
    size_t half = n / 3;
    EXPECT_EQ(crc32c::Extend(crc32c::Extend(0, buf.data(), half), buf.data() + half, n - half), ref) << n;
  }
}

TEST(Crc32c, MaskRoundTrips) {
  EXPECT_EQ(crc32c::Unmask(crc32c::Mask(0x12345678u)), 0x12345678u);
  EXPECT_NE(crc32c::Mask(0x12345678u), 0x12345678u);
}

}  // namespace
}  // namespace moe
