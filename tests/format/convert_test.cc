// moe convert / the container / moe inspect on the committed tiny fixtures
// (tools/format/make_fixtures.py): layout, values vs. source, resume,
// --delete-source, corruption, errors, and Python safetensors interop.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include "common/format/census.h"
#include "common/format/container.h"
#include "common/format/convert.h"
#include "common/format/crc32c.h"
#include "common/format/quantize.h"
#include "common/format/safetensors.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

namespace fs = std::filesystem;

std::string Fixture(const std::string& name) {
  return std::string(MOE_SOURCE_DIR) + "/tests/data/format/fixtures/" + name;
}

class FormatConvertTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = fs::temp_directory_path() /
           ("moe_convert_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(tmp_);
    fs::create_directories(tmp_);
  }
  void TearDown() override { fs::remove_all(tmp_); }

  absl::StatusOr<ConvertResult> Convert(const std::string& in, const std::string& out,
                                        ConvertPolicy policy = {}, int max_shards = -1,
                                        bool del = false) {
    ConvertOptions o;
    o.in_dir = in;
    o.out_dir = out;
    o.policy = policy;
    o.max_shards = max_shards;
    o.delete_source = del;
    return ConvertCheckpoint(o);
  }
  std::string Copy(const std::string& fixture) {
    const std::string dst = (tmp_ / ("in_" + fixture)).string();
    fs::copy(Fixture(fixture), dst, fs::copy_options::recursive);
    return dst;
  }
  fs::path tmp_;
};

std::string ReadAll(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Every container tensor dequantizes to within half a quantization step of
// the source (FP8 sources dequantized by the independent SafetensorsReader).
void CheckValuesAgainstSource(const Container& c, const std::string& in_dir) {
  auto src = SafetensorsReader::Open(in_dir);
  ASSERT_TRUE(src.ok()) << src.status().message();
  for (const auto& t : c.tensors()) {
    SCOPED_TRACE(t.name);
    auto got = c.ReadTensorF32(t);
    ASSERT_TRUE(got.ok()) << got.status().message();
    auto want = (*src)->ReadTensorF32(t.name);
    ASSERT_TRUE(want.ok()) << want.status().message();
    ASSERT_EQ(got->size(), want->size());
    std::vector<uint8_t> data;
    std::vector<float> scales;
    ASSERT_TRUE(c.ReadTensor(t, &data, &scales).ok());
    // The shared mapping sees the same bytes, aligned for the kernels.
    auto mapped = c.MapTensor(t);
    ASSERT_TRUE(mapped.ok()) << mapped.status().message();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(mapped->data) % 64, 0u);
    EXPECT_EQ(std::memcmp(mapped->data, data.data(), data.size()), 0);
    if (!scales.empty()) {
      EXPECT_EQ(std::memcmp(mapped->scales, scales.data(), scales.size() * 4), 0);
    }
    const int64_t g = GroupSize(t.format, t.cols), ng = GroupsPerRow(t.format, t.cols);
    for (int64_t i = 0; i < static_cast<int64_t>(got->size()); ++i) {
      const float w = (*want)[i], v = (*got)[i];
      if (t.format == QFormat::kF32) {
        ASSERT_EQ(v, w) << i;
      } else if (t.format == QFormat::kBF16) {
        ASSERT_LE(std::fabs(v - w), std::fabs(w) / 256) << i;
      } else {
        const float s = scales[(i / t.cols) * ng + (i % t.cols) / g];
        ASSERT_LE(std::fabs(v - w), 0.5f * s * 1.00001f) << i;
      }
    }
  }
}

void CheckRecords(const Container& c, int expected_records) {
  ASSERT_EQ(static_cast<int>(c.records().size()), expected_records);
  AlignedBuffer buf;
  for (const auto& r : c.records()) {
    SCOPED_TRACE(testing::Message() << "record " << r.layer << "/" << r.expert);
    EXPECT_EQ(r.offset % 4096, 0u);
    EXPECT_EQ(r.length % 4096, 0u);
    EXPECT_EQ(c.FindExpert(r.layer, r.expert), &r);
    auto bytes = c.ReadRecord(r, &buf);
    ASSERT_TRUE(bytes.ok()) << bytes.status().message();
    auto views = Container::ViewRecord(r, bytes->data());
    for (int p = 0; p < 3; ++p) {
      const ContainerTensor& t = *r.parts[p].tensor;
      EXPECT_NE(t.name.find(std::string(kExpertProjNames[p])), std::string::npos);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(views[p].data) % 64, 0u);
      std::vector<float> a(t.rows * t.cols);
      DequantizeMatrix(views[p].format, views[p].data, views[p].scales, t.rows, t.cols, a.data());
      auto b = c.ReadTensorF32(t);
      ASSERT_TRUE(b.ok());
      EXPECT_EQ(a, *b);
    }
  }
}

TEST_F(FormatConvertTest, ConvertsAllFixturesWithinFormatBounds) {
  for (const char* name : {"glm_bf16", "glm_fp8", "dsv3_bf16", "dsv3_fp8"}) {
    SCOPED_TRACE(name);
    const std::string out = (tmp_ / name).string();
    auto r = Convert(Fixture(name), out);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_TRUE(r->complete);
    EXPECT_EQ(r->num_shards, 4);
    EXPECT_EQ(r->shards_written, 4);
    auto c = Container::Open(out);
    ASSERT_TRUE(c.ok()) << c.status().message();
    // Every shard is 4096-aligned in length and data start.
    for (int f = 0; f < (*c)->reader().num_files(); ++f) {
      EXPECT_EQ((*c)->reader().file(f).data_offset % 4096, 0u);
      EXPECT_EQ((*c)->reader().file(f).size % 4096, 0u);
    }
    CheckRecords(**c, 16);  // 8 experts x (1 MoE layer + MTP layer)
    CheckValuesAgainstSource(**c, Fixture(name));
    // Side files copied.
    for (const char* f : {"config.json", "tokenizer.json", "chat_template.jinja",
                          "generation_config.json", "tokenizer_config.json"}) {
      EXPECT_EQ(ReadAll(out + "/" + f), ReadAll(Fixture(name) + "/" + f)) << f;
    }
  }
}

TEST_F(FormatConvertTest, PolicyFormatsAndCensus) {
  const std::string out = (tmp_ / "glm").string();
  ASSERT_TRUE(Convert(Fixture("glm_fp8"), out).ok());
  auto c = Container::Open(out);
  ASSERT_TRUE(c.ok());
  auto fmt = [&](const std::string& n) {
    const ContainerTensor* t = (*c)->Find(n);
    EXPECT_NE(t, nullptr) << n;
    return t ? std::string(Name(t->format)) : "";
  };
  EXPECT_EQ(fmt("model.layers.1.mlp.experts.3.down_proj.weight"), "q4_g64");
  EXPECT_EQ(fmt("model.layers.2.mlp.experts.3.down_proj.weight"), "q8_g128");  // MTP
  EXPECT_EQ(fmt("model.layers.2.eh_proj.weight"), "q8_g128");
  EXPECT_EQ(fmt("model.layers.1.self_attn.q_b_proj.weight"), "q8_g128");
  EXPECT_EQ(fmt("model.layers.1.self_attn.indexer.wk.weight"), "q8_g128");
  EXPECT_EQ(fmt("model.layers.0.mlp.down_proj.weight"), "q8_g128");
  EXPECT_EQ(fmt("model.layers.1.mlp.shared_experts.up_proj.weight"), "q8_g128");
  EXPECT_EQ(fmt("model.embed_tokens.weight"), "q8_row");
  EXPECT_EQ(fmt("lm_head.weight"), "q8_row");
  EXPECT_EQ(fmt("model.layers.1.mlp.gate.weight"), "f32");
  EXPECT_EQ(fmt("model.layers.1.mlp.gate.e_score_correction_bias"), "f32");
  EXPECT_EQ(fmt("model.layers.1.self_attn.indexer.k_norm.bias"), "f32");
  EXPECT_EQ(fmt("model.norm.weight"), "f32");

  auto census = TakeCensus(out);
  ASSERT_TRUE(census.ok()) << census.status().message();
  EXPECT_EQ(census->kind, "container");
  EXPECT_EQ(census->expert_records, 16);
  EXPECT_EQ(census->by_group["experts"].tensors, 24);  // layer 1 only; MTP counts as mtp
  EXPECT_EQ(census->by_format["q4_g64"].tensors, 24);
  EXPECT_EQ(census->by_group["embeddings"].tensors, 1);
  EXPECT_EQ(census->by_group["router"].tensors, 2);
  EXPECT_EQ(census->by_group["indexer"].tensors, 6);    // 3 per non-MTP layer
  EXPECT_EQ(census->by_group["dense_mlp"].tensors, 3);
  EXPECT_EQ(census->by_layer[-1].tensors, 3);
  EXPECT_EQ(census->tensors, static_cast<int64_t>((*c)->tensors().size()));
  // The same directory's source checkpoint has the same tensor census.
  auto src = TakeCensus(Fixture("glm_fp8"));
  ASSERT_TRUE(src.ok());
  EXPECT_EQ(src->kind, "checkpoint");
  EXPECT_EQ(src->tensors, census->tensors);
  EXPECT_EQ(src->by_group["experts"].tensors, 24);
  EXPECT_EQ(src->by_group.count("unknown"), 0u);
  EXPECT_NE(CensusJson(*census).find("\"by_role\""), std::string::npos);
  EXPECT_NE(CensusText(*census).find("16 expert records"), std::string::npos);

  // dense-int4 switch + an override.
  ConvertPolicy p = *ConvertPolicy::Named("dense-int4");
  p.indexer = QFormat::kBF16;
  const std::string out2 = (tmp_ / "glm4").string();
  ASSERT_TRUE(Convert(Fixture("glm_fp8"), out2, p).ok());
  auto c2 = Container::Open(out2);
  ASSERT_TRUE(c2.ok());
  EXPECT_EQ((*c2)->Find("model.layers.1.self_attn.o_proj.weight")->format, QFormat::kQ4G64);
  EXPECT_EQ((*c2)->Find("model.layers.1.self_attn.indexer.wq_b.weight")->format, QFormat::kBF16);
  CheckValuesAgainstSource(**c2, Fixture("glm_fp8"));
}

TEST_F(FormatConvertTest, Fp8DequantIsExactWithF32Policy) {
  ConvertPolicy p;
  p.experts = p.attention = p.dense_mlp = p.shared_experts = p.indexer = p.mtp = QFormat::kF32;
  p.embedding = p.lm_head = QFormat::kF32;
  const std::string out = (tmp_ / "f32").string();
  ASSERT_TRUE(Convert(Fixture("glm_fp8"), out, p).ok());
  auto c = Container::Open(out);
  ASSERT_TRUE(c.ok());
  CheckValuesAgainstSource(**c, Fixture("glm_fp8"));  // f32: exact equality
  // And one value by hand: W[r, c] = fp8(q) * S[r / 128, c / 128] across a block boundary.
  auto src = SafetensorsReader::Open(Fixture("glm_fp8"));
  ASSERT_TRUE(src.ok());
  const std::string n = "model.layers.0.mlp.gate_proj.weight";  // [192, 64], scale [2, 1]
  auto q = (*src)->ReadTensorBytes(n);
  auto s = (*src)->ReadTensorF32(n + "_scale_inv");
  ASSERT_TRUE(q.ok() && s.ok());
  auto got = (*c)->ReadTensorF32(*(*c)->Find(n));
  ASSERT_TRUE(got.ok());
  for (int r : {0, 127, 128, 191}) {
    EXPECT_EQ((*got)[r * 64 + 5], Fp8E4M3ToF32((*q)[r * 64 + 5]) * (*s)[r / 128]);
  }
}

TEST_F(FormatConvertTest, ResumesAfterInterruptionWithoutRedoingFinishedShards) {
  const std::string ref = (tmp_ / "ref").string();
  ASSERT_TRUE(Convert(Fixture("dsv3_fp8"), ref).ok());
  const std::string out = (tmp_ / "out").string();
  auto r1 = Convert(Fixture("dsv3_fp8"), out, {}, /*max_shards=*/1);
  ASSERT_TRUE(r1.ok()) << r1.status().message();
  EXPECT_FALSE(r1->complete);
  EXPECT_EQ(r1->shards_written, 1);
  EXPECT_FALSE(fs::exists(out + "/moestream.json"));
  EXPECT_EQ(Container::Open(out).status().code(), absl::StatusCode::kFailedPrecondition);
  // A crash in the middle of shard 2 leaves a .tmp behind.
  { std::ofstream(out + "/model-00002-of-00004.safetensors.tmp") << "half a shard"; }
  struct stat st1;
  ASSERT_EQ(::stat((out + "/model-00001-of-00004.safetensors").c_str(), &st1), 0);
  auto r2 = Convert(Fixture("dsv3_fp8"), out);
  ASSERT_TRUE(r2.ok()) << r2.status().message();
  EXPECT_TRUE(r2->complete);
  EXPECT_EQ(r2->shards_verified, 1);
  EXPECT_EQ(r2->shards_written, 3);
  struct stat st2;
  ASSERT_EQ(::stat((out + "/model-00001-of-00004.safetensors").c_str(), &st2), 0);
  EXPECT_EQ(st1.st_ino, st2.st_ino);
  EXPECT_EQ(st1.st_mtim.tv_nsec, st2.st_mtim.tv_nsec);
  for (int k = 1; k <= 4; ++k) {
    const std::string f = "/model-0000" + std::to_string(k) + "-of-00004.safetensors";
    EXPECT_EQ(ReadAll(out + f), ReadAll(ref + f)) << f << " differs from a one-shot conversion";
  }
  // A corrupted finished shard is detected and redone.
  {
    std::fstream f(out + "/model-00003-of-00004.safetensors",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-100, std::ios::end);
    f.put('\x5a');
  }
  auto c = Container::Open(out);
  ASSERT_TRUE(c.ok());
  AlignedBuffer buf;
  int bad = 0;
  for (const auto& r : (*c)->records()) bad += !(*c)->ReadRecord(r, &buf).ok();
  EXPECT_EQ(bad, 1) << "the flipped byte sits in the last record of shard 3";
  auto r3 = Convert(Fixture("dsv3_fp8"), out);
  ASSERT_TRUE(r3.ok());
  EXPECT_EQ(r3->shards_written, 1);
  EXPECT_EQ(ReadAll(out + "/model-00003-of-00004.safetensors"),
            ReadAll(ref + "/model-00003-of-00004.safetensors"));
  // A different policy on the same output directory is refused.
  auto r4 = Convert(Fixture("dsv3_fp8"), out, *ConvertPolicy::Named("dense-int4"));
  EXPECT_EQ(r4.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(FormatConvertTest, DeleteSourceOnlyAfterDependentOutputsAreDurable) {
  const std::string in = Copy("glm_fp8");
  const std::string out = (tmp_ / "out").string();
  std::set<std::string> deleted;
  for (int step = 0; step < 6; ++step) {
    auto r = Convert(in, out, {}, /*max_shards=*/1, /*delete_source=*/true);
    ASSERT_TRUE(r.ok()) << r.status().message();
    for (const auto& d : r->deleted) deleted.insert(d);
    // Every deleted input is only read by outputs that already exist.
    auto plan = nlohmann::json::parse(ReadAll(out + "/convert-plan.json"));
    for (const auto& s : plan["shards"]) {
      for (const auto& t : s["tensors"]) {
        for (const char* key : {"src_file", "scale_file"}) {
          if (!t.contains(key)) continue;
          const std::string input = plan["inputs"][t[key].get<int>()];
          if (deleted.count(input)) {
            EXPECT_TRUE(fs::exists(out + "/" + s["file"].get<std::string>()))
                << input << " deleted before " << s["file"] << " was written";
          }
        }
      }
    }
    if (r->complete) break;
  }
  EXPECT_EQ(deleted.size(), 4u);
  for (const auto& d : deleted) EXPECT_FALSE(fs::exists(in + "/" + d));
  auto c = Container::Open(out);
  ASSERT_TRUE(c.ok()) << c.status().message();
  CheckRecords(**c, 16);
  CheckValuesAgainstSource(**c, Fixture("glm_fp8"));
}

TEST_F(FormatConvertTest, ClearErrors) {
  // Unknown tensor name.
  const std::string in = Copy("glm_bf16");
  {
    // Rename a tensor inside shard 4's header (same length) -> unknown role.
    const std::string p = in + "/model-00004-of-00004.safetensors";
    std::string bytes = ReadAll(p);
    const std::string from = "model.norm.weight", to = "model.nrom.weight";
    auto pos = bytes.find(from);
    ASSERT_NE(pos, std::string::npos);
    bytes.replace(pos, from.size(), to);
    std::ofstream(p, std::ios::binary) << bytes;
    auto idx = ReadAll(in + "/model.safetensors.index.json");
    idx.replace(idx.find(from), from.size(), to);
    std::ofstream(in + "/model.safetensors.index.json") << idx;
  }
  auto r = Convert(in, (tmp_ / "o1").string());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(r.status().message()).find("unknown tensor role for 'model.nrom.weight'"),
            std::string::npos)
      << r.status().message();
  // Missing config field.
  const std::string in2 = Copy("dsv3_bf16");
  { std::ofstream(in2 + "/config.json") << R"({"model_type": "deepseek_v3", "hidden_size": 64})"; }
  r = Convert(in2, (tmp_ / "o2").string());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("missing field 'num_hidden_layers'"),
            std::string::npos)
      << r.status().message();
  // Missing input directory.
  r = Convert((tmp_ / "nope").string(), (tmp_ / "o3").string());
  ASSERT_FALSE(r.ok());
  // Missing FP8 scale: drop the scale from the index and shard header is
  // caught by the reader (names the tensor).
  const std::string in4 = Copy("glm_fp8");
  {
    const std::string p = in4 + "/model-00002-of-00004.safetensors";
    std::string bytes = ReadAll(p);
    const std::string from = "q_b_proj.weight_scale_inv", to = "q_b_proj.weight_scale_xxx";
    auto pos = bytes.find(from);
    ASSERT_NE(pos, std::string::npos);
    bytes.replace(pos, from.size(), to);
    std::ofstream(p, std::ios::binary) << bytes;
    auto idx = ReadAll(in4 + "/model.safetensors.index.json");
    idx.replace(idx.find(from), from.size(), to);
    std::ofstream(in4 + "/model.safetensors.index.json") << idx;
  }
  r = Convert(in4, (tmp_ / "o4").string());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("q_b_proj.weight"), std::string::npos)
      << r.status().message();
}

// A flipped byte in a mapped tensor is a CRC error naming the tensor; the
// other tensors still map.
TEST_F(FormatConvertTest, MapTensorDetectsCorruption) {
  const std::string out = (tmp_ / "map_corrupt").string();
  ASSERT_TRUE(Convert(Fixture("glm_bf16"), out).ok());
  const ContainerTensor* victim = nullptr;
  {
    auto c = Container::Open(out);
    ASSERT_TRUE(c.ok()) << c.status().message();
    for (const auto& t : (*c)->tensors()) {
      if (t.expert < 0 && t.data_bytes >= 64) {
        victim = (*c)->Find(t.name);
        break;
      }
    }
    ASSERT_NE(victim, nullptr);
    const std::string path = (*c)->file_path(victim->file);
    const uint64_t off = victim->data_offset + 7;
    const std::string name = victim->name;
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(off);
    char b = 0;
    f.read(&b, 1);
    b ^= 0x10;
    f.seekp(off);
    f.write(&b, 1);
    f.close();
    auto c2 = Container::Open(out);
    ASSERT_TRUE(c2.ok());
    auto m = (*c2)->MapTensor(*(*c2)->Find(name));
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(std::string(m.status().message()).find("'" + name + "': CRC32C mismatch"), std::string::npos)
        << m.status().message();
    int mapped = 0;
    for (const auto& t : (*c2)->tensors()) mapped += (t.name != name && (*c2)->MapTensor(t).ok());
    EXPECT_EQ(mapped, static_cast<int>((*c2)->tensors().size()) - 1);
  }
}

TEST_F(FormatConvertTest, PythonSafetensorsOpensEveryShard) {
  if (std::system("python3 -c 'import safetensors, numpy' 2>/dev/null") != 0) {
    FAIL() << "python3 with safetensors + numpy is required (deploy/requirements-test.txt)";
  }
  const std::string out = (tmp_ / "py").string();
  ASSERT_TRUE(Convert(Fixture("glm_fp8"), out).ok());
  const std::string cmd = "python3 " + std::string(MOE_SOURCE_DIR) +
                          "/tests/format/open_container.py " + out;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

}  // namespace
}  // namespace moe
