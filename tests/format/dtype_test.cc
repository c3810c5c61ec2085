// Exact dtype decoders vs. independent references: ml_dtypes / numpy tables
// committed by tools/format/gen_reader_fixtures.py, and GCC's _Float16.
#include "common/format/dtype.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/format/st_test_util.h"

namespace moe {
namespace {

using testing::Fixture;

std::vector<std::string> DataLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != '#') lines.push_back(line);
  }
  return lines;
}

uint64_t Fnv1a64(const std::vector<uint32_t>& words) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (uint32_t w : words) {
    for (int i = 0; i < 4; ++i) {
      h ^= (w >> (8 * i)) & 0xFF;
      h *= 0x100000001B3ull;
    }
  }
  return h;
}

TEST(DTypeTest, NamesAndSizesRoundTrip) {
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType d = static_cast<DType>(i);
    const auto back = DTypeFromName(DTypeName(d));
    ASSERT_TRUE(back.has_value()) << DTypeName(d);
    EXPECT_EQ(*back, d);
  }
  EXPECT_EQ(DTypeFromName("F8_E4M3"), DType::kF8E4M3);
  EXPECT_EQ(DTypeSize(DType::kF8E4M3), 1);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2);
  EXPECT_EQ(DTypeSize(DType::kI64), 8);
  EXPECT_FALSE(DTypeFromName("F8_E5M2").has_value());
  EXPECT_FALSE(DTypeFromName("f32").has_value());  // case-sensitive, as the format
  EXPECT_TRUE(DTypeIsFloat(DType::kF8E4M3));
  EXPECT_FALSE(DTypeIsFloat(DType::kI8));
}

TEST(DTypeTest, Fp8E4M3AllCodesMatchMlDtypes) {
  const auto lines = DataLines(Fixture("fp8_e4m3_table.txt"));
  ASSERT_EQ(lines.size(), 256u);
  int nans = 0;
  for (const std::string& line : lines) {
    unsigned code = 0, bits = 0;
    ASSERT_EQ(std::sscanf(line.c_str(), "%x %x", &code, &bits), 2) << line;
    const float got = Fp8E4M3ToF32(static_cast<uint8_t>(code));
    const float want = BitsToF32(bits);
    if (std::isnan(want)) {
      ++nans;
      EXPECT_TRUE(std::isnan(got)) << line;
      EXPECT_EQ(std::signbit(got), std::signbit(want)) << line;
    } else {
      EXPECT_EQ(F32ToBits(got), bits) << line;  // bit-exact, so -0 != +0
    }
  }
  EXPECT_EQ(nans, 2);  // 0x7F and 0xFF only
  EXPECT_EQ(Fp8E4M3ToF32(0x7E), 448.0f);
  EXPECT_EQ(Fp8E4M3ToF32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(F32ToBits(Fp8E4M3ToF32(0x80)), 0x80000000u);
}

TEST(DTypeTest, F16AndBf16AllCodesMatchReferenceHashes) {
  const auto lines = DataLines(Fixture("f16_bf16_hashes.txt"));
  ASSERT_EQ(lines.size(), 2u);
  unsigned long long want_f16 = 0, want_bf16 = 0;
  ASSERT_EQ(std::sscanf(lines[0].c_str(), "F16 %llx", &want_f16), 1);
  ASSERT_EQ(std::sscanf(lines[1].c_str(), "BF16 %llx", &want_bf16), 1);
  std::vector<uint32_t> f16(65536), bf16(65536);
  for (uint32_t c = 0; c < 65536; ++c) {
    f16[c] = F32ToBits(F16ToF32(static_cast<uint16_t>(c)));
    bf16[c] = F32ToBits(Bf16ToF32(static_cast<uint16_t>(c)));
  }
  EXPECT_EQ(Fnv1a64(f16), want_f16);
  EXPECT_EQ(Fnv1a64(bf16), want_bf16);
}

TEST(DTypeTest, F16AllCodesMatchCompilerFloat16) {
  // GCC's _Float16 conversion is an independent implementation; it may quiet
  // signalling NaNs, so NaNs compare by NaN-ness and sign. clang 14 has no _Float16 on x86
  // without AVX512-FP16 (the sanitizer build); the g++ Release build runs this.
#ifndef __FLT16_MAX__
  GTEST_SKIP() << "this compiler has no _Float16 on this target";
#else
  for (uint32_t c = 0; c < 65536; ++c) {
    const uint16_t h = static_cast<uint16_t>(c);
    _Float16 x;
    std::memcpy(&x, &h, 2);
    const float want = static_cast<float>(x);
    const float got = F16ToF32(h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << c;
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << std::hex << c;
    } else {
      ASSERT_EQ(F32ToBits(got), F32ToBits(want)) << std::hex << c;
    }
  }
#endif
}

TEST(DTypeTest, F32ToBf16RoundsToNearestEvenLikeMlDtypes) {
  const auto lines = DataLines(Fixture("f32_to_bf16.txt"));
  ASSERT_GT(lines.size(), 2000u);
  for (const std::string& line : lines) {
    unsigned in = 0, want = 0;
    ASSERT_EQ(std::sscanf(line.c_str(), "%x %x", &in, &want), 2) << line;
    const uint16_t got = F32ToBf16(BitsToF32(in));
    if (std::isnan(BitsToF32(in))) {
      EXPECT_TRUE(std::isnan(Bf16ToF32(got))) << line;
      EXPECT_EQ(got & 0x8000, in >> 16 & 0x8000) << line;
    } else {
      EXPECT_EQ(got, want) << line;
    }
  }
  // Round trip of every BF16 value is the identity (NaN stays NaN).
  for (uint32_t c = 0; c < 65536; ++c) {
    const float f = Bf16ToF32(static_cast<uint16_t>(c));
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(f))));
    } else {
      ASSERT_EQ(F32ToBf16(f), c);
    }
  }
}

TEST(DTypeTest, BulkDecodersMatchScalarDecodersForEveryCode) {
  // DecodeToF32 uses branch-free vectorizable forms; they must be
  // bit-identical (NaN payloads included) to the scalar decoders above.
  std::vector<uint8_t> codes(2 * 65536 + 1);
  for (uint32_t c = 0; c < 65536; ++c) {
    codes[1 + 2 * c] = static_cast<uint8_t>(c);
    codes[2 + 2 * c] = static_cast<uint8_t>(c >> 8);
  }
  std::vector<float> out(65536);
  DecodeToF32(DType::kF16, codes.data() + 1, 65536, out.data());
  for (uint32_t c = 0; c < 65536; ++c) {
    ASSERT_EQ(F32ToBits(out[c]), F32ToBits(F16ToF32(static_cast<uint16_t>(c)))) << std::hex << c;
  }
  DecodeToF32(DType::kBF16, codes.data() + 1, 65536, out.data());
  for (uint32_t c = 0; c < 65536; ++c) {
    ASSERT_EQ(F32ToBits(out[c]), F32ToBits(Bf16ToF32(static_cast<uint16_t>(c)))) << std::hex << c;
  }
  std::vector<uint8_t> fp8(256);
  for (int c = 0; c < 256; ++c) fp8[c] = static_cast<uint8_t>(c);
  DecodeToF32(DType::kF8E4M3, fp8.data(), 256, out.data());
  for (int c = 0; c < 256; ++c) {
    ASSERT_EQ(F32ToBits(out[c]), F32ToBits(Fp8E4M3ToF32(static_cast<uint8_t>(c)))) << std::hex << c;
  }
}

TEST(DTypeTest, DecodeToF32AllTypesUnalignedSource) {
  // One byte of offset so every multi-byte load is unaligned.
  auto check = [](DType d, const std::vector<uint8_t>& bytes, const std::vector<float>& want) {
    std::vector<uint8_t> buf(bytes.size() + 1);
    std::memcpy(buf.data() + 1, bytes.data(), bytes.size());
    std::vector<float> got(want.size(), -7.0f);
    DecodeToF32(d, buf.data() + 1, static_cast<int64_t>(want.size()), got.data());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << DTypeName(d) << " #" << i;
  };
  auto le = [](std::initializer_list<uint64_t> vals, int size) {
    std::vector<uint8_t> b;
    for (uint64_t v : vals) {
      for (int i = 0; i < size; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
    }
    return b;
  };
  check(DType::kF32, le({F32ToBits(1.5f), F32ToBits(-2.25f)}, 4), {1.5f, -2.25f});
  check(DType::kF16, le({0x3C00, 0xC000, 0x0001}, 2), {1.0f, -2.0f, std::ldexp(1.0f, -24)});
  check(DType::kBF16, le({0x3F80, 0xC040}, 2), {1.0f, -3.0f});
  check(DType::kF8E4M3, {0x38, 0xB8, 0x7E, 0x00}, {1.0f, -1.0f, 448.0f, 0.0f});
  check(DType::kI8, {0x7F, 0x80, 0xFF}, {127.0f, -128.0f, -1.0f});
  check(DType::kU8, {0x7F, 0x80, 0xFF}, {127.0f, 128.0f, 255.0f});
  check(DType::kI32, le({0xFFFFFFFFull, 123456}, 4), {-1.0f, 123456.0f});
  check(DType::kI64, le({~0ull, 1ull << 40}, 8), {-1.0f, std::ldexp(1.0f, 40)});
  check(DType::kBool, {0, 1, 2}, {0.0f, 1.0f, 1.0f});
  double d = -0.5;
  uint64_t dbits;
  std::memcpy(&dbits, &d, 8);
  check(DType::kF64, le({dbits}, 8), {-0.5f});
}

}  // namespace
}  // namespace moe
