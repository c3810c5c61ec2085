// Byte-exact comparison of the C++ quantizers with the NumPy reference
// (tools/format/quant_ref.py gen tests/data/format), plus decode of every code.
#include "common/format/quantize.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

struct Cases {
  nlohmann::json index;
  std::string blob;
};

const Cases& LoadCases() {
  static const Cases* cases = [] {
    auto* c = new Cases;
    const std::string dir = std::string(MOE_SOURCE_DIR) + "/tests/data/format/";
    c->index = nlohmann::json::parse(ReadAll(dir + "quant_cases.json"));
    c->blob = ReadAll(dir + "quant_cases.bin");
    return c;
  }();
  return *cases;
}

TEST(FormatQuantizeTest, MatchesNumpyReferenceByteForByte) {
  const Cases& c = LoadCases();
  ASSERT_FALSE(c.blob.empty());
  int compared = 0;
  for (const auto& cs : c.index["cases"]) {
    const std::string name = cs["name"];
    const int64_t rows = cs["rows"], cols = cs["cols"];
    std::vector<float> w(rows * cols);
    std::memcpy(w.data(), c.blob.data() + cs["input_offset"].get<int64_t>(), w.size() * 4);
    for (const auto& info : kQFormatTable) {
      SCOPED_TRACE(name + " " + std::string(info.name));
      const auto& out = cs["outputs"][std::string(info.name)];
      std::vector<uint8_t> data(DataBytes(info.format, rows, cols) + 1, 0xEE);
      std::vector<float> scales(rows * GroupsPerRow(info.format, cols) + 1, -7.0f);
      absl::Status s = QuantizeMatrix(info.format, w.data(), rows, cols, data.data(),
                                      scales.data(), name);
      if (out.contains("error")) {
        EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
        EXPECT_NE(std::string(s.message()).find("non-finite value at row 0"), std::string::npos)
            << s.message();
        continue;
      }
      ASSERT_TRUE(s.ok()) << s.message();
      ASSERT_EQ(out["data_bytes"].get<int64_t>(), DataBytes(info.format, rows, cols));
      ASSERT_EQ(out["scales_bytes"].get<int64_t>(), ScaleBytes(info.format, rows, cols));
      EXPECT_EQ(0, std::memcmp(data.data(), c.blob.data() + out["data_offset"].get<int64_t>(),
                               DataBytes(info.format, rows, cols)));
      EXPECT_EQ(0, std::memcmp(scales.data(),
                               c.blob.data() + out["scales_offset"].get<int64_t>(),
                               ScaleBytes(info.format, rows, cols)));
      EXPECT_EQ(data.back(), 0xEE) << "wrote past the data";
      EXPECT_EQ(scales.back(), -7.0f) << "wrote past the scales";
      // Round trip stays within half a step of its group.
      std::vector<float> back(rows * cols);
      DequantizeMatrix(info.format, data.data(), scales.data(), rows, cols, back.data());
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < cols; ++i) {
          const float v = w[r * cols + i], b = back[r * cols + i];
          if (info.format == QFormat::kF32) {
            EXPECT_EQ(std::memcmp(&v, &b, 4), 0);
          } else if (info.format == QFormat::kBF16) {
            if (std::isnormal(v) && std::fabs(v) < 3.38e38f) {  // no subnormal/overflow
              EXPECT_LE(std::fabs(b - v), std::fabs(v) * (1.0f / 256));
            }
          } else {
            const float sc = scales[r * GroupsPerRow(info.format, cols) +
                                    i / GroupSize(info.format, cols)];
            ASSERT_LE(std::fabs(b - v), 0.5f * sc * 1.000001f) << r << "," << i;
          }
        }
      }
      ++compared;
    }
  }
  EXPECT_GT(compared, 100);
}

TEST(FormatQuantizeTest, DecodesEveryCodeIncludingMinusQmaxMinusOne) {
  // int4: byte j holds codes (j & 15) low and (j >> 4) high; 256 bytes cover every pair.
  std::vector<uint8_t> data(256);
  for (int j = 0; j < 256; ++j) data[j] = static_cast<uint8_t>(j);
  std::vector<float> out(512);
  const float scale = 0.5f;
  DequantizeRow(QFormat::kQ4Row, data.data(), &scale, 512, out.data());
  for (int j = 0; j < 256; ++j) {
    EXPECT_EQ(out[2 * j], ((j & 15) - 8) * 0.5f);
    EXPECT_EQ(out[2 * j + 1], ((j >> 4) - 8) * 0.5f);
  }
  std::vector<float> out2(1024);
  DequantizeRow(QFormat::kQ2Row, data.data(), &scale, 1024, out2.data());
  for (int j = 0; j < 256; ++j) {
    for (int k = 0; k < 4; ++k) EXPECT_EQ(out2[4 * j + k], (((j >> (2 * k)) & 3) - 2) * 0.5f);
  }
  std::vector<float> out8(256);
  DequantizeRow(QFormat::kQ8Row, data.data(), &scale, 256, out8.data());
  for (int j = 0; j < 256; ++j) EXPECT_EQ(out8[j], static_cast<int8_t>(j) * 0.5f);
  EXPECT_EQ(out8[128], -64.0f);  // -128 * 0.5: the -qmax-1 code
  // Grouped: each group takes its own scale, the last one partial (70 = 32 + 32 + 6).
  const float gs[3] = {0.5f, -2.0f, 3.0f};
  std::vector<float> g8(70), g4(70);
  DequantizeRow(QFormat::kQ8G32, data.data(), gs, 70, g8.data());
  DequantizeRow(QFormat::kQ4G32, data.data(), gs, 70, g4.data());
  for (int i = 0; i < 70; ++i) {
    EXPECT_EQ(g8[i], static_cast<int8_t>(i) * gs[i / 32]) << i;
    EXPECT_EQ(g4[i], (((data[i / 2] >> (4 * (i & 1))) & 15) - 8) * gs[i / 32]) << i;
  }
}

TEST(FormatQuantizeTest, ClampsAndSaturatesAtQmax) {
  // A row whose absmax is positive maps exactly to +qmax; the most negative
  // value that fits maps to -qmax (never -qmax-1 for finite input).
  const float w[4] = {3.0f, -3.0f, 1.5f, 0.0f};
  uint8_t d[4];
  float s;
  ASSERT_TRUE(QuantizeRow(QFormat::kQ8Row, w, 4, d, &s, nullptr));
  EXPECT_EQ(static_cast<int8_t>(d[0]), 127);
  EXPECT_EQ(static_cast<int8_t>(d[1]), -127);
  EXPECT_EQ(static_cast<int8_t>(d[2]), 64);  // 63.5 -> 64 (even)
  EXPECT_EQ(s, 3.0f / 127.0f);
}

TEST(FormatQuantizeTest, RejectsNonFiniteWithPosition) {
  std::vector<float> w(3 * 70, 1.0f);
  w[2 * 70 + 65] = NAN;
  std::vector<uint8_t> d(DataBytes(QFormat::kQ4G64, 3, 70));
  std::vector<float> s(3 * 2);
  absl::Status st = QuantizeMatrix(QFormat::kQ4G64, w.data(), 3, 70, d.data(), s.data(), "t.w");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(std::string(st.message()),
            "t.w: non-finite value at row 2, column 65 cannot be quantized to q4_g64");
}

TEST(FormatQuantizeTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(F32ToBF16(1.0f), 0x3F80);
  uint32_t u = 0x3F808000;  // halfway, even below -> stays
  float v;
  std::memcpy(&v, &u, 4);
  EXPECT_EQ(F32ToBF16(v), 0x3F80);
  u = 0x3F818000;  // halfway, odd below -> rounds up
  std::memcpy(&v, &u, 4);
  EXPECT_EQ(F32ToBF16(v), 0x3F82);
  EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(NAN))));
}

}  // namespace
}  // namespace moe
