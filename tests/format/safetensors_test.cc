// SafetensorsReader: interop with files written by Hugging Face's safetensors,
// sharded checkpoints, byte-range reads (pread and O_DIRECT), FP8 dequant.
#include "common/format/safetensors.h"

#include <cmath>
#include <random>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/format/st_test_util.h"

namespace moe {
namespace {

using ::testing::HasSubstr;
using testing::BuildSafetensors;
using testing::Fixture;
using testing::TempDir;
using testing::TestTensor;
using testing::WriteFileBytes;

std::unique_ptr<SafetensorsReader> MustOpen(const std::string& path, const OpenOptions& o = {}) {
  auto r = SafetensorsReader::Open(path, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? std::move(r).value() : nullptr;
}

// Every tensor of `r` decodes to exactly the float32 tensor of the same name
// in `expected` (written by numpy/ml_dtypes).
void ExpectDecodesLike(const SafetensorsReader& r, const SafetensorsReader& expected) {
  ASSERT_EQ(r.tensors().size(), expected.tensors().size());
  for (const TensorInfo& e : expected.tensors()) {
    const TensorInfo* t = r.Find(e.name);
    ASSERT_NE(t, nullptr) << e.name;
    EXPECT_EQ(t->shape, e.shape) << e.name;
    auto want = expected.ReadTensorF32(e.name);
    auto got = r.ReadTensorF32(e.name);
    ASSERT_TRUE(want.ok() && got.ok()) << e.name << " " << got.status();
    ASSERT_EQ(got->size(), want->size()) << e.name;
    for (size_t i = 0; i < got->size(); ++i) {
      ASSERT_EQ(F32ToBits((*got)[i]), F32ToBits((*want)[i])) << e.name << " element " << i;
    }
  }
}

TEST(SafetensorsTest, ReadsFileWrittenByHuggingFaceSafetensors) {
  auto r = MustOpen(Fixture("interop.safetensors"));
  auto e = MustOpen(Fixture("interop_expected.safetensors"));
  ASSERT_TRUE(r && e);
  EXPECT_EQ(r->num_files(), 1);
  EXPECT_EQ(r->metadata().at("format"), "pt");
  EXPECT_EQ(r->metadata().at("moe.note"), "interop fixture");

  const TensorInfo* w = r->Find("model.layers.0.mlp.down_proj.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DType::kF8E4M3);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{129, 257}));
  EXPECT_EQ(w->nbytes, 129u * 257u);
  const TensorInfo* s = r->ScaleOf(*w);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(r->Find("model.norm.weight")->dtype, DType::kBF16);
  EXPECT_EQ(r->Find("h16")->dtype, DType::kF16);
  EXPECT_EQ(r->Find("flags")->dtype, DType::kBool);
  EXPECT_EQ(r->Find("scalar")->ndim(), 0);
  EXPECT_EQ(r->Find("empty")->numel(), 0);

  ExpectDecodesLike(*r, *e);

  // Tensors are ordered by offset and tile the data section (HF writes no gaps).
  uint64_t end = r->file(0).data_offset;
  for (const TensorInfo& t : r->tensors()) {
    EXPECT_EQ(t.offset, end) << t.name;
    end = t.offset + t.nbytes;
  }
  EXPECT_EQ(end, r->file(0).size);
}

TEST(SafetensorsTest, RawBytesMatchFile) {
  const std::string path = Fixture("interop.safetensors");
  auto r = MustOpen(path);
  ASSERT_TRUE(r);
  const std::string file = testing::ReadFileBytes(path);
  for (const TensorInfo& t : r->tensors()) {
    auto bytes = r->ReadTensorBytes(t.name);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    ASSERT_EQ(bytes->size(), t.nbytes);
    EXPECT_EQ(std::string(bytes->begin(), bytes->end()), file.substr(t.offset, t.nbytes)) << t.name;
  }
}

TEST(SafetensorsTest, Fp8RowRangesAcrossBlockBoundaries) {
  auto r = MustOpen(Fixture("interop.safetensors"));
  auto e = MustOpen(Fixture("interop_expected.safetensors"));
  ASSERT_TRUE(r && e);
  const std::string name = "model.layers.0.mlp.down_proj.weight";
  auto want = e->ReadTensorF32(name);
  ASSERT_TRUE(want.ok());
  const TensorInfo& t = *r->Find(name);
  const int64_t cols = t.shape[1];
  for (auto [b, en] : std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {127, 129}, {128, 129}, {5, 5}, {100, 129}}) {
    std::vector<float> got(static_cast<size_t>((en - b) * cols));
    ASSERT_TRUE(r->ReadRowsF32(t, b, en, got.data()).ok());
    for (int64_t i = 0; i < (en - b) * cols; ++i) {
      ASSERT_EQ(got[i], (*want)[b * cols + i]) << "rows " << b << ".." << en << " i=" << i;
    }
  }
  std::vector<float> dummy(cols);
  EXPECT_EQ(r->ReadRowsF32(t, 128, 130, dummy.data()).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(r->ReadRowsF32(t, 2, 1, dummy.data()).code(), absl::StatusCode::kOutOfRange);
}

TEST(SafetensorsTest, ShardedCheckpointWithIndex) {
  const std::string dir = Fixture("interop_sharded");
  auto e = MustOpen(Fixture("interop_sharded_expected.safetensors"));
  for (const std::string& path : {dir, dir + "/model.safetensors.index.json"}) {
    auto r = MustOpen(path);
    ASSERT_TRUE(r && e);
    EXPECT_EQ(r->num_files(), 2);
    EXPECT_EQ(r->metadata(1).at("format"), "pt");
    const TensorInfo* w = r->Find("model.layers.0.self_attn.o_proj.weight");
    ASSERT_NE(w, nullptr);
    const TensorInfo* s = r->ScaleOf(*w);
    ASSERT_NE(s, nullptr);
    EXPECT_NE(w->file, s->file);  // the scale lives in the other shard
    EXPECT_THAT(r->file(w->file).path, HasSubstr("model-00001-of-00002.safetensors"));
    EXPECT_EQ(r->tensors_in_file(1).size(), 2u);
    ExpectDecodesLike(*r, *e);
  }
}

TEST(SafetensorsTest, DirectoryWithoutIndexOpensAllShards) {
  TempDir tmp("st");
  WriteFileBytes(tmp.File("b.safetensors"), BuildSafetensors({{"y", "U8", "2", "ab"}}));
  WriteFileBytes(tmp.File("a.safetensors"), BuildSafetensors({{"x", "I8", "1", "z"}}));
  WriteFileBytes(tmp.File("notes.txt"), "ignored");
  auto r = MustOpen(tmp.path().string());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->num_files(), 2);
  EXPECT_THAT(r->file(0).path, HasSubstr("a.safetensors"));
  EXPECT_EQ(r->Find("y")->file, 1);
  auto y = r->ReadTensorF32("y");
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(*y, (std::vector<float>{97.0f, 98.0f}));
}

TEST(SafetensorsTest, LookupErrorsAndBounds) {
  auto r = MustOpen(Fixture("interop.safetensors"));
  ASSERT_TRUE(r);
  auto missing = r->Get("no.such.tensor");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("no.such.tensor"));
  EXPECT_EQ(r->Find("no.such.tensor"), nullptr);
  uint8_t b[16];
  EXPECT_EQ(r->ReadRange(0, r->file(0).size - 4, 8, b).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(r->ReadRange(0, ~0ull, 8, b).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(r->ReadRange(3, 0, 1, b).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(r->ReadRange(0, r->file(0).size - 4, 4, b).ok());
  auto nf = SafetensorsReader::Open(Fixture("does_not_exist.safetensors"));
  EXPECT_EQ(nf.status().code(), absl::StatusCode::kNotFound);
}

// A file big enough to span many 4 KiB pages, tensors at odd offsets.
std::string BigFile(std::string* data_out) {
  std::mt19937 rng(7);
  std::string a(70000, '\0'), b(12345, '\0'), c(3, '\0');
  for (auto* s : {&a, &b, &c}) {
    for (char& ch : *s) ch = static_cast<char>(rng());
  }
  *data_out = a + b + c;
  return BuildSafetensors({{"a", "U8", "70000", a}, {"b", "U8", "12345", b}, {"c", "U8", "3", c}});
}

TEST(SafetensorsTest, DirectAndBufferedRangeReadsAgree) {
  TempDir tmp("st");
  std::string data;
  const std::string file = BigFile(&data);
  WriteFileBytes(tmp.File("big.safetensors"), file);
  for (bool direct : {true, false}) {
    OpenOptions o;
    o.direct_io = direct;
    auto r = MustOpen(tmp.File("big.safetensors"), o);
    ASSERT_TRUE(r);
    if (!direct) {
      EXPECT_FALSE(r->direct_io_active(0));
    }
    std::printf("[direct_io=%d] O_DIRECT active on %s: %d\n", direct, tmp.path().c_str(), r->direct_io_active(0));
    std::mt19937_64 rng(direct ? 1 : 2);
    AlignedBuffer buf(4096);
    for (int i = 0; i < 300; ++i) {
      const uint64_t off = rng() % file.size();
      const uint64_t len = (i % 10 == 0) ? file.size() - off : rng() % std::min<uint64_t>(file.size() - off, 9000);
      auto span = r->ReadRangeDirect(0, off, len, &buf);
      ASSERT_TRUE(span.ok()) << span.status();
      ASSERT_EQ(span->size(), len);
      ASSERT_EQ(std::string(reinterpret_cast<const char*>(span->data()), len), file.substr(off, len))
          << "off " << off << " len " << len;
      std::string plain(len, '\0');
      ASSERT_TRUE(r->ReadRange(0, off, len, plain.data()).ok());
      ASSERT_EQ(plain, file.substr(off, len));
    }
    // Whole tensors through the direct path, including the last (ends at EOF).
    for (const TensorInfo& t : r->tensors()) {
      auto span = r->ReadTensorDirect(t, &buf);
      ASSERT_TRUE(span.ok()) << span.status();
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(span->data()), span->size()),
                file.substr(t.offset, t.nbytes));
    }
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buf.data()) % kDirectIoAlign, 0u);
    EXPECT_GE(buf.capacity(), AlignUp(file.size(), kDirectIoAlign));
    auto bad = r->ReadRangeDirect(0, file.size() - 1, 2, &buf);
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kOutOfRange);
  }
}

TEST(SafetensorsTest, ConcurrentReadsFromManyThreads) {
  TempDir tmp("st");
  std::string data;
  const std::string file = BigFile(&data);
  WriteFileBytes(tmp.File("big.safetensors"), file);
  auto r = MustOpen(tmp.File("big.safetensors"));
  ASSERT_TRUE(r);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      AlignedBuffer buf;
      for (int i = 0; i < 200; ++i) {
        const uint64_t off = rng() % file.size();
        const uint64_t len = rng() % std::min<uint64_t>(file.size() - off, 5000);
        std::string plain(len, '\0');
        auto span = (i % 2) ? r->ReadRangeDirect(0, off, len, &buf) : absl::StatusOr<std::span<const uint8_t>>();
        const bool ok_direct =
            (i % 2) == 0 || (span.ok() && std::string(reinterpret_cast<const char*>(span->data()), len) ==
                                              file.substr(off, len));
        const bool ok_plain = r->ReadRange(0, off, len, plain.data()).ok() && plain == file.substr(off, len);
        if (!ok_direct || !ok_plain) failures++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(SafetensorsTest, DecodesEveryDtypeAndGapsBetweenTensors) {
  TempDir tmp("st");
  auto le16 = [](std::initializer_list<uint16_t> v) {
    std::string s;
    for (uint16_t x : v) s += {static_cast<char>(x & 0xFF), static_cast<char>(x >> 8)};
    return s;
  };
  // 4 KiB-aligned records (as the moestream container writes them).
  const std::string file = BuildSafetensors(
      {{"bf", "BF16", "2", le16({0x3F80, 0xC040})},
       {"h", "F16", "1,2", le16({0x3C00, 0x0001})},
       {"i", "I32", "1", std::string("\xff\xff\xff\xff", 4)},
       {"f8", "F8_E4M3", "3", std::string("\x38\xb8\x7e", 3)}},  // not *.weight: no scale needed
      R"({"moe.format":"q4_g64"})", 4096);
  WriteFileBytes(tmp.File("m.safetensors"), file);
  auto r = MustOpen(tmp.File("m.safetensors"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->metadata().at("moe.format"), "q4_g64");
  EXPECT_EQ((r->Find("h")->offset - r->file(0).data_offset) % 4096, 0u);
  EXPECT_EQ(*r->ReadTensorF32("bf"), (std::vector<float>{1.0f, -3.0f}));
  EXPECT_EQ(*r->ReadTensorF32("h"), (std::vector<float>{1.0f, std::ldexp(1.0f, -24)}));
  EXPECT_EQ(*r->ReadTensorF32("i"), (std::vector<float>{-1.0f}));
  EXPECT_EQ(*r->ReadTensorF32("f8"), (std::vector<float>{1.0f, -1.0f, 448.0f}));
  EXPECT_EQ(r->ScaleOf(*r->Find("f8")), nullptr);
}

TEST(SafetensorsTest, Fp8LargeTensorDecodesInSlabs) {
  // 1000 x 9000 FP8 (9 MB) exceeds one 8 MiB decode slab; block scales are
  // powers of two so every product is exact and easy to predict.
  TempDir tmp("st");
  const int64_t rows = 1000, cols = 9000;
  std::string q(static_cast<size_t>(rows * cols), '\0');
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) q[r * cols + c] = static_cast<char>((r * 7 + c * 3) % 0x7E);
  }
  const int64_t sr = 8, sc = 71;
  std::string s;
  for (int64_t i = 0; i < sr * sc; ++i) {
    const float v = std::ldexp(1.0f, static_cast<int>(i % 5) - 2);
    s.append(reinterpret_cast<const char*>(&v), 4);
  }
  WriteFileBytes(tmp.File("w.safetensors"),
                 BuildSafetensors({{"x.weight", "F8_E4M3", "1000,9000", q}, {"x.weight_scale_inv", "F32", "8,71", s}}));
  auto r = MustOpen(tmp.File("w.safetensors"));
  ASSERT_TRUE(r);
  auto got = r->ReadTensorF32("x.weight");
  ASSERT_TRUE(got.ok()) << got.status();
  for (int64_t i = 0; i < rows; i += 37) {
    for (int64_t c = 0; c < cols; c += 13) {
      const int64_t si = (i / 128) * sc + c / 128;
      const float want = Fp8E4M3ToF32(static_cast<uint8_t>(q[i * cols + c])) * std::ldexp(1.0f, static_cast<int>(si % 5) - 2);
      ASSERT_EQ((*got)[i * cols + c], want) << i << "," << c;
    }
  }
}

}  // namespace
}  // namespace moe
