// Randomized corruption (LevelDB corruption_test style): flip, overwrite,
// insert and truncate bytes of valid files thousands of times. The reader must
// return OK or a clean error every time, never crash or read out of bounds
// (this runs under ASan+UBSan in CI). When Open succeeds, every tensor must
// also read and decode without error.
#include <random>
#include <string>

#include "common/format/safetensors.h"
#include "common/format/safetensors_header.h"
#include "gtest/gtest.h"
#include "tests/format/st_test_util.h"

namespace moe {
namespace {

using testing::BuildSafetensors;
using testing::Fixture;
using testing::TempDir;
using testing::WriteFileBytes;

// A small valid file with an FP8 weight + scale, mixed dtypes and metadata.
std::string Seed() {
  std::string q(130 * 3, '\0');
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<char>(i * 37);
  std::string s(2 * 1 * 4, '\0');
  const float one = 1.0f;
  std::memcpy(s.data(), &one, 4);
  std::memcpy(s.data() + 4, &one, 4);
  return BuildSafetensors({{"model.a.weight", "F8_E4M3", "130,3", q},
                           {"model.a.weight_scale_inv", "F32", "2,1", s},
                           {"b", "BF16", "2,2", "abcdefgh"},
                           {"c", "I64", "1", "12345678"},
                           {"d", "U8", "0", ""}},
                          R"({"format":"pt","k":"v"})");
}

std::string Mutate(const std::string& in, std::mt19937_64& rng) {
  std::string s = in;
  const uint64_t header_end = s.size() >= 8 ? std::min<uint64_t>(s.size(), 8 + (s[0] & 0xFF) + ((s[1] & 0xFF) << 8)) : s.size();
  const int kind = static_cast<int>(rng() % 7);
  // Most edits land in the prefix + header, where the structure lives.
  auto pos = [&](uint64_t limit) { return limit == 0 ? 0 : rng() % limit; };
  switch (kind) {
    case 0: {  // flip 1..4 bits
      const int n = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < n && !s.empty(); ++i) s[pos(header_end)] ^= static_cast<char>(1 << (rng() % 8));
      break;
    }
    case 1: {  // overwrite a byte with a JSON-significant character
      static const char kChars[] = "{}[]\":,-0123456789eE. \\\x00\xff";
      if (!s.empty()) s[pos(header_end)] = kChars[rng() % (sizeof(kChars) - 1)];
      break;
    }
    case 2:  // truncate
      s.resize(pos(s.size() + 1));
      break;
    case 3:  // corrupt the length prefix
      if (s.size() >= 8) s[rng() % 8] = static_cast<char>(rng());
      break;
    case 4: {  // delete a run of header bytes (shifts the JSON)
      const uint64_t p = pos(header_end);
      s.erase(p, 1 + rng() % 8);
      break;
    }
    case 5: {  // duplicate a run of header bytes
      const uint64_t p = pos(header_end);
      s.insert(p, s.substr(p, 1 + rng() % 16));
      break;
    }
    case 6:  // scribble over tensor data (files stay structurally valid)
      if (!s.empty()) s[pos(s.size())] = static_cast<char>(rng());
      break;
  }
  return s;
}

int Exercise(const SafetensorsReader& r) {
  int read = 0;
  AlignedBuffer buf;
  for (const TensorInfo& t : r.tensors()) {
    std::vector<uint8_t> raw(t.nbytes);
    EXPECT_TRUE(r.ReadTensorRaw(t, raw.data()).ok()) << t.name;
    std::vector<float> f(static_cast<size_t>(t.numel()));
    const absl::Status s = r.ReadTensorF32(t, f.data());
    // Decoding may only fail for a mismatched FP8 scale (checked at read time
    // for tensors the open-time check does not cover).
    if (!s.ok()) {
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    }
    EXPECT_TRUE(r.ReadTensorDirect(t, &buf).ok()) << t.name;
    ++read;
  }
  return read;
}

TEST(CorruptionTest, RandomlyCorruptedFilesNeverCrash) {
  TempDir tmp("corrupt");
  const std::vector<std::string> seeds = {Seed(), testing::ReadFileBytes(Fixture("interop.safetensors"))};
  std::mt19937_64 rng(20260601);
  int opened = 0, rejected = 0;
  const std::string path = tmp.File("x.safetensors");
  for (int iter = 0; iter < 3000; ++iter) {
    std::string bytes = seeds[iter % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) bytes = Mutate(bytes, rng);
    // Unlink first: rewriting in place via O_TRUNC makes ext4 flush on close.
    std::filesystem::remove(path);
    WriteFileBytes(path, bytes);
    auto r = SafetensorsReader::Open(path);
    if (r.ok()) {
      ++opened;
      Exercise(**r);
    } else {
      ++rejected;
      // A clean error names the file.
      ASSERT_NE(std::string(r.status().message()).find("x.safetensors"), std::string::npos) << r.status();
    }
  }
  std::printf("corruption: %d opened, %d rejected\n", opened, rejected);
  EXPECT_GT(rejected, 1000);  // the mutations really do break files
  EXPECT_GT(opened, 10);      // and some survive (data-only edits)
}

TEST(CorruptionTest, HeaderParserOnRandomBytes) {
  // In-memory, no I/O: many more iterations over the JSON parser directly.
  const std::string seed = Seed();
  const uint64_t n = static_cast<uint8_t>(seed[0]) | (static_cast<uint64_t>(static_cast<uint8_t>(seed[1])) << 8);
  const std::string header = seed.substr(8, n);
  std::mt19937_64 rng(99);
  int ok = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string h = header;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !h.empty(); ++e) {
      const uint64_t p = rng() % h.size();
      switch (rng() % 3) {
        case 0: h[p] = static_cast<char>(rng()); break;
        case 1: h.erase(p, 1 + rng() % 4); break;
        case 2: h.insert(p, 1, "{}[]\",:-019e"[rng() % 12]); break;
      }
    }
    auto parsed = ParseSafetensorsHeader(h, 8 + h.size() + (seed.size() - 8 - n), "mem");
    if (parsed.ok()) {
      ++ok;
      for (const HeaderTensor& t : parsed->tensors) {
        ASSERT_LE(t.begin, t.end);
        ASSERT_LE(t.end, parsed->data_bytes);
      }
    } else {
      ASSERT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss);
    }
  }
  std::printf("header parser: %d of 20000 mutated headers accepted\n", ok);
}

}  // namespace
}  // namespace moe
