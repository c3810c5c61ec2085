// KvCache::ReadRows (the gather DSA attention reads a long context with)
// returns exactly what Read returns for each row, in the order asked, for
// both storage types; the saved file round-trips, and files of the previous
// version (CRC-32) or with a damaged checksum are refused, each by its cause;
// version-2 files (before int8 index keys) are still read. Int8 index keys
// (index_q8) hold each key to half a quantization step, give the raw rows the
// indexer scores, and survive Truncate and Save/Load bit for bit. Reserve
// changes nothing a reader sees.
#include "common/model/kv_cache.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/format/crc32c.h"

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
  EXPECT_NE(msg.find("reads versions 2 to 3"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("mismatch"), std::string::npos) << msg;  // a version error, not a checksum mismatch

  // A damaged current-version file: the checksum says so.
  std::string bad = bytes;
  bad[bad.size() / 2] ^= 0x10;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bad;
  auto damaged = KvCache::Load(path);
  EXPECT_EQ(damaged.status().code(), absl::StatusCode::kDataLoss) << damaged.status();
  EXPECT_NE(std::string(damaged.status().message()).find("checksum mismatch"), std::string::npos);

  // A version-2 file (this cache has no int8 keys: every layer's flags are 0) is read.
  std::string v2 = bytes.substr(0, bytes.size() - 4);
  const uint32_t two = 2;
  std::memcpy(v2.data() + 8, &two, 4);
  const uint32_t crc2 = crc32c::Mask(crc32c::Value(v2.data(), v2.size()));
  v2.append(reinterpret_cast<const char*>(&crc2), 4);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << v2;
  auto older = KvCache::Load(path);
  ASSERT_TRUE(older.ok()) << older.status();
  EXPECT_EQ(older->tokens(), c.tokens());
  EXPECT_FALSE(older->index_q8());
  std::filesystem::remove_all(dir);
}

TEST(KvCache, Int8IndexKeysQuantizeReadTruncateAndRoundTrip) {
  const int64_t id = 128;
  KvCache c(4, 2, id, {true, false}, KvDtype::kF32, /*index_q8=*/true);
  ASSERT_TRUE(c.index_q8());
  std::vector<std::vector<float>> keys;
  for (int t = 0; t < 5; ++t) {
    std::vector<float> k(id);
    for (int64_t i = 0; i < id; ++i) k[i] = std::sin(0.37f * (i + 1) * (t + 1)) * (t + 1);
    keys.push_back(k);
    const float lat[4] = {1, 2, 3, 4}, rope[2] = {5, 6};
    for (int l = 0; l < 2; ++l) {
      c.Append(l, KvCache::kRope, rope);
      c.Append(l, KvCache::kLatent, lat);
    }
    c.Append(0, KvCache::kIndexKey, k.data());
  }
  // 128 codes + one f32 scale per key; latents and rope keys as before.
  EXPECT_EQ(c.Bytes(), 5 * (id + 4) + 2 * 5 * (4 + 2) * 4);
  std::vector<float> got(5 * id);
  c.Read(0, KvCache::kIndexKey, 0, 5, got.data());
  const KvCache::Q8Rows raw = c.IndexKeysQ8(0);
  for (int t = 0; t < 5; ++t) {
    float amax = 0;
    for (float v : keys[t]) amax = std::max(amax, std::fabs(v));
    EXPECT_FLOAT_EQ(raw.scales[t], amax / 127.0f) << t;
    for (int64_t i = 0; i < id; ++i) {
      EXPECT_NEAR(got[t * id + i], keys[t][i], raw.scales[t] / 2 + 1e-6f) << t << "," << i;
      EXPECT_EQ(got[t * id + i], raw.data[t * id + i] * raw.scales[t]);
    }
  }
  const std::string dir = (std::filesystem::temp_directory_path() / ("moe-kvq8-" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/q8.kv";
  c.Truncate(3);
  EXPECT_EQ(c.Bytes(), 3 * (id + 4) + 2 * 3 * (4 + 2) * 4);
  ASSERT_TRUE(c.Save(path).ok());
  auto back = KvCache::Load(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->index_q8());
  EXPECT_EQ(back->length(0), 3);
  std::vector<float> again(3 * id);
  back->Read(0, KvCache::kIndexKey, 0, 3, again.data());
  for (int64_t i = 0; i < 3 * id; ++i) EXPECT_EQ(again[i], got[i]) << i;
  std::filesystem::remove_all(dir);
}

TEST(KvCache, IndexKeysNamesParseAndResolve) {
  for (IndexKeys k : {IndexKeys::kAuto, IndexKeys::kExact, IndexKeys::kQ8}) {
    auto p = ParseIndexKeys(IndexKeysName(k));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(*p, k);
  }
  auto bad = ParseIndexKeys("fp8");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(bad.status().message()).find("'fp8'"), std::string::npos);
  EXPECT_TRUE(IndexKeysQ8(IndexKeys::kAuto, true));
  EXPECT_FALSE(IndexKeysQ8(IndexKeys::kAuto, false));
  EXPECT_TRUE(IndexKeysQ8(IndexKeys::kQ8, false));
  EXPECT_FALSE(IndexKeysQ8(IndexKeys::kExact, true));
}

}  // namespace
}  // namespace moe

namespace moe {
namespace {

// Reserve makes room without changing what the cache holds; later appends
// land where they would have without it.
TEST(KvCache, ReserveKeepsContentsAndLength) {
  for (bool q8 : {false, true}) {
    KvCache a(4, 2, 3, {true, false}, KvDtype::kBF16, q8), b = a;
    auto append = [](KvCache& c, int t) {
      for (int l = 0; l < 2; ++l) {
        const float lat[4] = {t + 0.5f, -t * 1.25f, 100.0f + t, l * 1.0f}, rope[2] = {t * 3.0f, -1.0f - l};
        const float idx[3] = {1.0f * t, 2.0f, -3.0f};
        c.Append(l, KvCache::kRope, rope);
        if (l == 0) c.Append(l, KvCache::kIndexKey, idx);
        c.Append(l, KvCache::kLatent, lat);
      }
    };
    for (int t = 0; t < 3; ++t) append(a, t), append(b, t);
    b.Reserve(64);
    EXPECT_EQ(b.length(), 3);
    EXPECT_EQ(b.Serialize(), a.Serialize());
    for (int t = 3; t < 9; ++t) append(a, t), append(b, t);
    EXPECT_EQ(b.Serialize(), a.Serialize());
  }
}

}  // namespace
}  // namespace moe
