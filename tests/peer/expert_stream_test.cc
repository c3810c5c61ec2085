#include "services/peer/expert_stream.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "common/format/qformat.h"

namespace moe::peer {
namespace {

// An expert of q4_g64 matrices [rows x cols]: 3 x ~1.2 MB of data, so chunks cross arrays.
struct Fake {
  std::vector<uint8_t> data[3];
  std::vector<float> scales[3];
  ExpertWeights w;
  explicit Fake(int64_t rows = 1024, int64_t cols = 2304) {
    std::mt19937 rng(7);
    ExpertMatrix* m[3] = {&w.gate, &w.up, &w.down};
    for (int i = 0; i < 3; ++i) {
      const int64_t r = i == 2 ? cols : rows, c = i == 2 ? rows : cols;
      data[i].resize(DataBytes(QFormat::kQ4G64, r, c));
      scales[i].resize(ScaleBytes(QFormat::kQ4G64, r, c) / 4);
      for (auto& b : data[i]) b = static_cast<uint8_t>(rng());
      for (auto& s : scales[i]) s = static_cast<float>(rng() % 1000) / 7.0f;
      *m[i] = {QFormat::kQ4G64, r, c, data[i].data(), scales[i].data()};
    }
  }
};

std::vector<ExpertChunk> Stream(const ExpertWeights& w, uint32_t crc = 99) {
  std::vector<ExpertChunk> out;
  EXPECT_TRUE(StreamExpert(w, crc, [&](const ExpertChunk& c) {
    out.push_back(c);
    return true;
  }));
  return out;
}

absl::StatusOr<ExpertLease> Assemble(const std::vector<ExpertChunk>& chunks) {
  ExpertAssembler a;
  for (const auto& c : chunks) {
    if (absl::Status s = a.Add(c); !s.ok()) return s;
  }
  return a.Finish();
}

void ExpectSameBytes(const ExpertMatrix& a, const ExpertMatrix& b) {
  ASSERT_EQ(a.format, b.format);
  ASSERT_EQ(a.rows, b.rows);
  ASSERT_EQ(a.cols, b.cols);
  EXPECT_EQ(std::memcmp(a.data, b.data, DataBytes(a.format, a.rows, a.cols)), 0);
  EXPECT_EQ(std::memcmp(a.scales, b.scales, ScaleBytes(a.format, a.rows, a.cols)), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data) % 64, 0u);
}

TEST(ExpertStream, RoundTripsExactlyAcrossChunkBoundaries) {
  Fake f;
  const auto chunks = Stream(f.w);
  ASSERT_GT(chunks.size(), 3u);
  EXPECT_EQ(chunks[0].record_crc(), 99u);
  for (size_t i = 1; i < chunks.size(); ++i) EXPECT_LE(chunks[i].data().size(), kExpertChunkBytes);
  auto lease = Assemble(chunks);
  ASSERT_TRUE(lease.ok()) << lease.status();
  ExpectSameBytes(f.w.gate, lease->weights().gate);
  ExpectSameBytes(f.w.up, lease->weights().up);
  ExpectSameBytes(f.w.down, lease->weights().down);
}

TEST(ExpertStream, RefusesDamagedStreamsByName) {
  Fake f;
  const auto good = Stream(f.w);
  auto refuse = [&](std::vector<ExpertChunk> chunks, const std::string& needle) {
    auto r = Assemble(chunks);
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_TRUE(absl::IsDataLoss(r.status()));
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status();
  };
  refuse({}, "empty stream");
  refuse({good.begin() + 1, good.end()}, "does not start with a header");
  refuse({good.begin(), good.end() - 1}, "bytes announced");  // truncated
  auto extra = good;
  extra.back().mutable_data()->append("x");
  refuse(extra, "more bytes than");
  auto flipped = good;
  (*flipped[1].mutable_data())[5] ^= 1;
  refuse(flipped, "CRC32C differs");
  auto bad_header = good;
  bad_header[0].mutable_matrices(1)->set_data_bytes(12);
  refuse(bad_header, "does not match its format");
  auto two_headers = good;
  two_headers.insert(two_headers.begin() + 1, good[0]);
  refuse(two_headers, "second header");
}

TEST(ExpertStream, StopsWhenTheReaderGoesAway) {
  Fake f;
  int calls = 0;
  EXPECT_FALSE(StreamExpert(f.w, 0, [&](const ExpertChunk&) { return ++calls < 2; }));
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace moe::peer
