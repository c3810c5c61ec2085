// KvCache::ReadRows (the gather DSA attention reads a long context with)
// returns exactly what Read returns for each row, in the order asked, for
// both storage types; the saved file round-trips, and files of the previous
// version (CRC-32) or with a damaged checksum are refused, each by its cause.
#include "common/model/kv_cache.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace moe {
namespace {

TEST(KvCache, ReadRowsGathersTheRowsReadWouldReturn) {
  for (KvDtype dt : {KvDtype::kF32, KvDtype::kBF16}) {
    KvCache c(4, 2, 3, {true, false}, dt);
    for (int t = 0; t < 6; ++t) {
      for (int l = 0; l < 2; ++l) {
        const float lat[4] = {t + 0.5f, -t * 1.25f, 100.0f + t, l * 1.0f};
        const float rope[2] = {t * 3.0f, -1.0f - l};
        c.Append(l, KvCache::kRope, rope);
        c.Append(l, KvCache::kLatent, lat);
        if (l == 0) {
          const float idx[3] = {1.0f * t, 2.0f, 3.0f};
          c.Append(l, KvCache::kIndexKey, idx);
        }
      }
    }
    const std::vector<int32_t> rows = {5, 0, 3, 3};
    for (auto s : {KvCache::kLatent, KvCache::kRope}) {
      const int64_t w = c.width(s);
      std::vector<float> got(rows.size() * w, -7.0f), want(w);
      c.ReadRows(1, s, rows, got.data());
      for (size_t i = 0; i < rows.size(); ++i) {
        c.Read(1, s, rows[i], 1, want.data());
        for (int64_t k = 0; k < w; ++k) EXPECT_EQ(got[i * w + k], want[k]) << "row " << rows[i] << " col " << k;
      }
    }
    std::vector<float> none(1, -7.0f);
    c.ReadRows(0, KvCache::kLatent, {}, none.data());
    EXPECT_EQ(none[0], -7.0f);  // nothing asked, nothing written
  }
}

KvCache SmallCache() {
  KvCache c(4, 2, 3, {true, false}, KvDtype::kBF16);
  for (int t = 0; t < 3; ++t) {
    for (int l = 0; l < 2; ++l) {
      const float lat[4] = {t + 0.5f, -1.0f, 2.0f, l * 1.0f};
      const float rope[2] = {t * 3.0f, 1.0f};
      const float idx[3] = {1.0f, 2.0f, 3.0f};
      c.Append(l, KvCache::kLatent, lat);
      c.Append(l, KvCache::kRope, rope);
      if (l == 0) c.Append(l, KvCache::kIndexKey, idx);
    }
    c.tokens().push_back(10 + t);
  }
  c.set_pending_token(42);
  return c;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The version-1 checksum: CRC-32 (zlib polynomial, reflected), as the old
// writer computed it over every byte before the trailer.
uint32_t OldCrc32(const std::string& b) {
  uint32_t c = ~0u;
  for (unsigned char x : b) {
    c ^= x;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
  }
  return ~c;
}

TEST(KvCache, SaveLoadRoundTripsAndOldOrDamagedFilesAreRefusedByCause) {
  const std::string dir = (std::filesystem::temp_directory_path() / ("moe-kv-" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/conv.kv";
  const KvCache c = SmallCache();
  ASSERT_TRUE(c.Save(path).ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  auto back = KvCache::Load(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->tokens(), c.tokens());
  EXPECT_EQ(back->pending_token(), 42);
  EXPECT_EQ(back->Bytes(), c.Bytes());
  const std::string bytes = Slurp(path);

  // A version-1 file: the same layout with version 1 and the old CRC-32 trailer.
  std::string v1 = bytes.substr(0, bytes.size() - 4);
  const uint32_t one = 1;
  std::memcpy(v1.data() + 8, &one, 4);  // FileHeader::version follows the 8-byte magic
  const uint32_t old_crc = OldCrc32(v1);
  v1.append(reinterpret_cast<const char*>(&old_crc), 4);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << v1;
  auto old = KvCache::Load(path);
  EXPECT_EQ(old.status().code(), absl::StatusCode::kFailedPrecondition) << old.status();
  const std::string msg(old.status().message());
  EXPECT_NE(msg.find("version 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("reads version 2"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("mismatch"), std::string::npos) << msg;  // a version error, not a checksum mismatch

  // A damaged current-version file: the checksum says so.
  std::string bad = bytes;
  bad[bad.size() / 2] ^= 0x10;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bad;
  auto damaged = KvCache::Load(path);
  EXPECT_EQ(damaged.status().code(), absl::StatusCode::kDataLoss) << damaged.status();
  EXPECT_NE(std::string(damaged.status().message()).find("checksum mismatch"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace moe
