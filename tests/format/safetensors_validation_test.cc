// Every malformed-checkpoint case ends in a clear error naming file and tensor.
#include <fcntl.h>
#include <unistd.h>

#include <string>

#include "common/format/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/format/st_test_util.h"

namespace moe {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::BuildSafetensors;
using testing::Entry;
using testing::MakeSafetensors;
using testing::TempDir;
using testing::TestTensor;
using testing::WriteFileBytes;

class ValidationTest : public ::testing::Test {
 protected:
  // Writes `bytes` as <name> and returns the Open error (fails if Open succeeds).
  absl::Status OpenError(const std::string& bytes, const std::string& name = "bad.safetensors",
                         const OpenOptions& o = {}) {
    WriteFileBytes(tmp_.File(name), bytes);
    return OpenPathError(tmp_.File(name), o);
  }
  absl::Status OpenPathError(const std::string& path, const OpenOptions& o = {}) {
    auto r = SafetensorsReader::Open(path, o);
    EXPECT_FALSE(r.ok()) << "Open(" << path << ") unexpectedly succeeded";
    return r.ok() ? absl::OkStatus() : r.status();
  }
  static std::string Msg(const absl::Status& s) { return std::string(s.message()); }

  TempDir tmp_{"val"};
};

std::string F32s(int n) { return std::string(static_cast<size_t>(4 * n), '\x01'); }

TEST_F(ValidationTest, HeaderLengthBeyondFile) {
  std::string f = MakeSafetensors("{}", "");
  f[0] = 100;  // claims a 100-byte header in a 10-byte file
  const absl::Status s = OpenError(f);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Msg(s), AllOf(HasSubstr("bad.safetensors"), HasSubstr("header length 100 extends beyond the file")));
}

TEST_F(ValidationTest, HeaderLengthAbsurd) {
  // A sparse 200 MB file whose header claims 150 MB: within the file, over the limit.
  const std::string path = tmp_.File("huge.safetensors");
  std::string prefix(8, '\0');
  const uint64_t n = 150ull << 20;
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>(n >> (8 * i));
  WriteFileBytes(path, prefix + "{");
  ASSERT_EQ(::truncate(path.c_str(), 200ll << 20), 0);
  const absl::Status s = OpenPathError(path);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Msg(s), AllOf(HasSubstr("huge.safetensors"), HasSubstr("exceeds the limit")));
}

TEST_F(ValidationTest, FileTooShortOrEmpty) {
  EXPECT_THAT(Msg(OpenError("")), HasSubstr("too short"));
  EXPECT_THAT(Msg(OpenError("abc")), HasSubstr("too short"));
}

TEST_F(ValidationTest, MalformedJson) {
  const absl::Status s = OpenError(MakeSafetensors(R"({"w": {"dtype": "F32", "shape": [1],)", F32s(1)));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Msg(s), AllOf(HasSubstr("bad.safetensors"), HasSubstr("malformed header JSON")));
  EXPECT_THAT(Msg(OpenError(MakeSafetensors("[1, 2]", ""))), HasSubstr("does not start with '{'"));
  EXPECT_THAT(Msg(OpenError(MakeSafetensors("{} trailing", ""))), HasSubstr("malformed header JSON"));
  EXPECT_THAT(Msg(OpenError(MakeSafetensors(R"({"w": 5})", ""))), AllOf(HasSubstr("'w'"), HasSubstr("not a JSON object")));
}

TEST_F(ValidationTest, DeeplyNestedJsonIsRejectedWithoutRecursion) {
  const std::string deep = "{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_THAT(Msg(OpenError(MakeSafetensors(deep, ""))), HasSubstr("nests deeper"));
}

TEST_F(ValidationTest, UnknownDtype) {
  const absl::Status s = OpenError(MakeSafetensors(std::string("{") + Entry("model.x", "F8_E5M2", "4", 0, 4) + "}", F32s(1)));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Msg(s), AllOf(HasSubstr("bad.safetensors"), HasSubstr("'model.x'"), HasSubstr("unknown dtype \"F8_E5M2\"")));
}

TEST_F(ValidationTest, MissingFields) {
  EXPECT_THAT(Msg(OpenError(MakeSafetensors(R"({"t": {"shape": [1], "data_offsets": [0, 4]}})", F32s(1)))),
              AllOf(HasSubstr("'t'"), HasSubstr("\"dtype\"")));
  EXPECT_THAT(Msg(OpenError(MakeSafetensors(R"({"t": {"dtype": "F32", "data_offsets": [0, 4]}})", F32s(1)))),
              AllOf(HasSubstr("'t'"), HasSubstr("\"shape\"")));
  EXPECT_THAT(Msg(OpenError(MakeSafetensors(R"({"t": {"dtype": "F32", "shape": [1]}})", F32s(1)))),
              AllOf(HasSubstr("'t'"), HasSubstr("data_offsets")));
  EXPECT_THAT(Msg(OpenError(MakeSafetensors(R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", F32s(1)))),
              HasSubstr("data_offsets"));
}

TEST_F(ValidationTest, ShapeTimesDtypeNotEqualToByteRange) {
  const absl::Status s = OpenError(MakeSafetensors(std::string("{") + Entry("layer.w", "BF16", "3,4", 0, 20) + "}", F32s(5)));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Msg(s), AllOf(HasSubstr("bad.safetensors"), HasSubstr("'layer.w'"), HasSubstr("24 bytes"),
                            HasSubstr("span 20")));
}

TEST_F(ValidationTest, OffsetsOutsideDataSection) {
  const absl::Status s = OpenError(MakeSafetensors(std::string("{") + Entry("w", "F32", "2", 4, 12) + "}", F32s(2)));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Msg(s), AllOf(HasSubstr("'w'"), HasSubstr("beyond the data section (8 bytes")));
  EXPECT_THAT(Msg(OpenError(MakeSafetensors(std::string("{") + Entry("w", "F32", "0", 8, 4) + "}", F32s(2)))),
              AllOf(HasSubstr("'w'"), HasSubstr("begin 8 > end 4")));
  EXPECT_THAT(Msg(OpenError(MakeSafetensors(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", F32s(1)))),
              AllOf(HasSubstr("'w'"), HasSubstr("not non-negative integers")));
}

TEST_F(ValidationTest, OverlappingRanges) {
  const absl::Status s = OpenError(
      MakeSafetensors(std::string("{") + Entry("a", "F32", "2", 0, 8) + "," + Entry("b", "F32", "2", 4, 12) + "}", F32s(3)));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Msg(s), AllOf(HasSubstr("bad.safetensors"), HasSubstr("'a'"), HasSubstr("'b'"), HasSubstr("overlap")));
  // Empty tensors may sit anywhere, and touching ranges are fine.
  WriteFileBytes(tmp_.File("ok.safetensors"),
                 MakeSafetensors(std::string("{") + Entry("a", "F32", "1", 0, 4) + "," + Entry("b", "F32", "1", 4, 8) + "," +
                                     Entry("e", "F32", "0", 2, 2) + "}",
                                 F32s(2)));
  EXPECT_TRUE(SafetensorsReader::Open(tmp_.File("ok.safetensors")).ok());
}

TEST_F(ValidationTest, NegativeFloatAndOverflowingDims) {
  EXPECT_THAT(Msg(OpenError(MakeSafetensors(std::string("{") + Entry("n", "F32", "-1", 0, 0) + "}", ""))),
              AllOf(HasSubstr("'n'"), HasSubstr("shape[0] = -1")));
  EXPECT_THAT(Msg(OpenError(MakeSafetensors(std::string("{") + Entry("f", "F32", "1.5", 0, 4) + "}", F32s(1)))),
              AllOf(HasSubstr("'f'"), HasSubstr("not a non-negative integer")));
  EXPECT_THAT(Msg(OpenError(MakeSafetensors(std::string("{") + Entry("o", "F32", "4294967296,4294967296", 0, 0) + "}", ""))),
              AllOf(HasSubstr("'o'"), HasSubstr("overflows")));
  EXPECT_THAT(Msg(OpenError(MakeSafetensors(std::string("{") + Entry("o", "I64", "2305843009213693952", 0, 0) + "}", ""))),
              AllOf(HasSubstr("'o'"), HasSubstr("overflows")));
  EXPECT_THAT(Msg(OpenError(MakeSafetensors(std::string("{") + Entry("b", "F32", "99999999999999999999", 0, 0) + "}", ""))),
              AllOf(HasSubstr("'b'"), HasSubstr("not a non-negative integer")));
  EXPECT_THAT(Msg(OpenError(MakeSafetensors(std::string("{") + Entry("d", "F32", "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1", 0, 4) + "}",
                                            F32s(1)))),
              AllOf(HasSubstr("'d'"), HasSubstr("17 dims")));
}

TEST_F(ValidationTest, MetadataMustBeStrings) {
  const absl::Status s = OpenError(MakeSafetensors(R"({"__metadata__": {"format": 3}})", ""));
  EXPECT_THAT(Msg(s), AllOf(HasSubstr("bad.safetensors"), HasSubstr("__metadata__[\"format\"] is not a string")));
}

TEST_F(ValidationTest, Fp8WeightWithoutScale) {
  const absl::Status s =
      OpenError(BuildSafetensors({{"model.layers.3.mlp.up_proj.weight", "F8_E4M3", "2,2", "abcd"}}));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Msg(s), AllOf(HasSubstr("bad.safetensors"), HasSubstr("'model.layers.3.mlp.up_proj.weight'"),
                            HasSubstr("'model.layers.3.mlp.up_proj.weight_scale_inv' are missing")));
  // The check can be switched off; the raw codes are then decoded unscaled.
  OpenOptions o;
  o.check_fp8_scales = false;
  auto r = SafetensorsReader::Open(tmp_.File("bad.safetensors"), o);
  ASSERT_TRUE(r.ok()) << r.status();
}

TEST_F(ValidationTest, Fp8WeightNot2D) {
  const absl::Status s = OpenError(BuildSafetensors({{"m.weight", "F8_E4M3", "2,1,2", "abcd"},
                                                     {"m.weight_scale_inv", "F32", "1,1", F32s(1)}}));
  EXPECT_THAT(Msg(s), AllOf(HasSubstr("'m.weight'"), HasSubstr("must be 2-D")));
}

TEST_F(ValidationTest, ScaleWithWrongShapeOrDtype) {
  // [300, 129] needs scales [3, 2].
  const std::string q(300 * 129, '\x38');
  absl::Status s = OpenError(
      BuildSafetensors({{"m.weight", "F8_E4M3", "300,129", q}, {"m.weight_scale_inv", "F32", "2,2", F32s(4)}}));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Msg(s), AllOf(HasSubstr("bad.safetensors"), HasSubstr("'m.weight_scale_inv'"), HasSubstr("[2, 2]"),
                            HasSubstr("expected [3, 2]")));
  s = OpenError(BuildSafetensors({{"m.weight", "F8_E4M3", "300,129", q}, {"m.weight_scale_inv", "I32", "3,2", F32s(6)}}));
  EXPECT_THAT(Msg(s), AllOf(HasSubstr("'m.weight_scale_inv'"), HasSubstr("dtype I32")));

  // With the open-time check off, the decode path still refuses a bad scale.
  WriteFileBytes(tmp_.File("unchecked.safetensors"),
                 BuildSafetensors({{"m.weight", "F8_E4M3", "300,129", q}, {"m.weight_scale_inv", "F32", "2,2", F32s(4)}}));
  OpenOptions o;
  o.check_fp8_scales = false;
  auto r = SafetensorsReader::Open(tmp_.File("unchecked.safetensors"), o);
  ASSERT_TRUE(r.ok()) << r.status();
  auto w = (*r)->ReadTensorF32("m.weight");
  EXPECT_EQ(w.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Msg(w.status()), HasSubstr("'m.weight_scale_inv' does not match 'm.weight'"));
}

// ---- sharded checkpoints ----------------------------------------------------

class IndexTest : public ValidationTest {
 protected:
  void WriteShards() {
    WriteFileBytes(tmp_.File("s1.safetensors"), BuildSafetensors({{"a", "F32", "1", F32s(1)}}));
    WriteFileBytes(tmp_.File("s2.safetensors"), BuildSafetensors({{"b", "F32", "1", F32s(1)}}));
  }
  absl::Status IndexError(const std::string& index_json) {
    WriteShards();
    WriteFileBytes(tmp_.File("model.safetensors.index.json"), index_json);
    return OpenPathError(tmp_.path().string());
  }
};

TEST_F(IndexTest, ValidIndexOpens) {
  WriteShards();
  WriteFileBytes(tmp_.File("model.safetensors.index.json"),
                 R"({"metadata": {"total_size": 8}, "weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})");
  auto r = SafetensorsReader::Open(tmp_.path().string());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->num_files(), 2);
}

TEST_F(IndexTest, MissingShard) {
  const absl::Status s = IndexError(R"({"weight_map": {"a": "s1.safetensors", "c": "s3.safetensors"}})");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Msg(s), AllOf(HasSubstr("model.safetensors.index.json"), HasSubstr("s3.safetensors"), HasSubstr("'c'"),
                            HasSubstr("missing")));
}

TEST_F(IndexTest, EntryPointsToShardLackingTensor) {
  const absl::Status s = IndexError(R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors"}})");
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Msg(s), AllOf(HasSubstr("model.safetensors.index.json"), HasSubstr("'b'"), HasSubstr("s1.safetensors"),
                            HasSubstr("does not contain it")));
  EXPECT_THAT(Msg(IndexError(R"({"weight_map": {"zz": "s1.safetensors"}})")),
              AllOf(HasSubstr("'zz'"), HasSubstr("does not contain it")));
}

TEST_F(IndexTest, MalformedIndex) {
  EXPECT_THAT(Msg(IndexError(R"({"weight_map": )")), AllOf(HasSubstr("index.json"), HasSubstr("malformed JSON")));
  EXPECT_THAT(Msg(IndexError(R"({"metadata": {}})")), HasSubstr("no \"weight_map\""));
  EXPECT_THAT(Msg(IndexError(R"({"weight_map": {"a": 1}})")), HasSubstr("weight_map[\"a\"] is not a string"));
  EXPECT_THAT(Msg(IndexError(R"({"weight_map": {"a": "../s1.safetensors"}})")),
              AllOf(HasSubstr("'a'"), HasSubstr("not a relative path inside the checkpoint")));
  EXPECT_THAT(Msg(IndexError(R"({"weight_map": {"a": "/etc/passwd"}})")), HasSubstr("not a relative path"));
}

TEST_F(IndexTest, DuplicateTensorAcrossShards) {
  WriteFileBytes(tmp_.File("s1.safetensors"), BuildSafetensors({{"a", "F32", "1", F32s(1)}}));
  WriteFileBytes(tmp_.File("s2.safetensors"), BuildSafetensors({{"a", "F32", "1", F32s(1)}}));
  const absl::Status s = OpenPathError(tmp_.path().string());  // no index: all shards
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Msg(s), AllOf(HasSubstr("s2.safetensors"), HasSubstr("'a'"), HasSubstr("also appears in"),
                            HasSubstr("s1.safetensors")));
}

TEST_F(IndexTest, BrokenShardIsNamed) {
  WriteShards();
  WriteFileBytes(tmp_.File("s2.safetensors"), MakeSafetensors(std::string("{") + Entry("b", "F64", "1", 0, 4) + "}", F32s(1)));
  WriteFileBytes(tmp_.File("model.safetensors.index.json"),
                 R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})");
  const absl::Status s = OpenPathError(tmp_.path().string());
  EXPECT_THAT(Msg(s), AllOf(HasSubstr("s2.safetensors"), HasSubstr("'b'"), HasSubstr("8 bytes")));
}

TEST_F(ValidationTest, EmptyDirectoryAndNonexistentPath) {
  EXPECT_EQ(OpenPathError(tmp_.path().string()).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(OpenPathError(tmp_.File("nope")).code(), absl::StatusCode::kNotFound);
}

TEST_F(ValidationTest, FileTruncatedAfterOpen) {
  WriteFileBytes(tmp_.File("t.safetensors"), BuildSafetensors({{"w", "F32", "1000", F32s(1000)}}));
  auto r = SafetensorsReader::Open(tmp_.File("t.safetensors"));
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(::truncate(tmp_.File("t.safetensors").c_str(), 100), 0);
  auto w = (*r)->ReadTensorF32("w");
  EXPECT_EQ(w.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Msg(w.status()), AllOf(HasSubstr("t.safetensors"), HasSubstr("unexpected end of file")));
  AlignedBuffer buf;
  auto d = (*r)->ReadTensorDirect(*(*r)->Find("w"), &buf);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace moe
