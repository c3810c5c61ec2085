// moe synth's full-size stand-ins (common/format/synth_model.h): the real
// releases' tensor inventories (names, shapes, dtypes, FP8 scale blocks,
// MTP layer, GLM-5.2's shared-indexer layers, the exclusion list), the
// safetensors writer, determinism, and that routed-expert holes stay holes
// through moe convert.
#include <omp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "common/format/container.h"
#include "common/format/convert.h"
#include "common/format/safetensors.h"
#include "common/format/safetensors_writer.h"
#include "common/format/synth_model.h"
#include "gtest/gtest.h"
#include "tests/format/synth_fixture.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

uint64_t DiskBytes(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_blocks) * 512 : 0;
}

class SynthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = fs::temp_directory_path() / ("moe_synth_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(tmp_);
    fs::create_directories(tmp_);
  }
  void TearDown() override { fs::remove_all(tmp_); }
  fs::path tmp_;
};

std::map<std::string, const SynthTensor*> ByName(const SynthPlan& p) {
  std::map<std::string, const SynthTensor*> m;
  for (const auto& t : p.tensors) m[t.spec.name] = &t;
  return m;
}

SynthPlan Plan(const std::string& name, const std::vector<std::pair<std::string, std::string>>& sets = {},
               SynthOptions o = {}) {
  auto text = BuiltinConfig(name);
  EXPECT_TRUE(text.ok()) << text.status().message();
  auto cfg = ApplyConfigOverrides(*text, sets);
  EXPECT_TRUE(cfg.ok()) << cfg.status().message();
  auto p = PlanSynthCheckpoint(*cfg, o);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return std::move(*p);
}

TEST(SafetensorsWriterTest, TensorsReadBackAndUnwrittenOnesAreHoles) {
  const fs::path dir = fs::temp_directory_path() / ("moe_st_writer_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "a.safetensors").string();
  std::vector<TensorSpec> specs = {{"small", DType::kF32, {3}},
                                   {"big_hole", DType::kU8, {8 << 20}},
                                   {"tail", DType::kBF16, {2, 2}}};
  auto layout = LayOutSafetensors(specs, {{"format", "pt"}});
  ASSERT_TRUE(layout.ok()) << layout.status().message();
  auto w = SafetensorsFileWriter::Create(path, *layout);
  ASSERT_TRUE(w.ok()) << w.status().message();
  const float small[3] = {1.5f, -2.0f, 3.25f};
  ASSERT_TRUE((*w)->Write(0, 0, small, sizeof small).ok());
  const uint16_t tail[4] = {0x3F80, 0x4000, 0xC000, 0x0000};
  ASSERT_TRUE((*w)->Write(2, 0, tail, sizeof tail).ok());
  EXPECT_FALSE((*w)->Write(2, 4, tail, sizeof tail).ok());  // past the tensor
  ASSERT_TRUE((*w)->Finish().ok());
  auto r = SafetensorsReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status().message();
  auto a = (*r)->ReadTensorF32("small");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, std::vector<float>({1.5f, -2.0f, 3.25f}));
  auto t = (*r)->ReadTensorF32("tail");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, std::vector<float>({1.0f, 2.0f, -2.0f, 0.0f}));
  auto h = (*r)->ReadTensorBytes("big_hole");
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(std::all_of(h->begin(), h->end(), [](uint8_t b) { return b == 0; }));
  EXPECT_EQ((*r)->metadata().at("format"), "pt");
  EXPECT_LT(DiskBytes(path), 1u << 20) << "the unwritten 8 MiB must be a hole";
  EXPECT_FALSE(LayOutSafetensors({{"x", DType::kF32, {1}}, {"x", DType::kF32, {1}}}).ok());
  fs::remove_all(dir);
}

TEST(SynthPlanTest, Glm5HasTheReleasesTensorsDtypesAndShards) {
  const SynthPlan p = Plan("glm-5");
  const ModelConfig& c = p.config;
  EXPECT_EQ(c.num_hidden_layers, 78);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);  // the release, not GlmMoeDsaConfig's default
  EXPECT_EQ(c.max_position_embeddings, 202752);
  auto t = ByName(p);
  auto dtype = [&](const std::string& n) {
    EXPECT_TRUE(t.count(n)) << n;
    return t.count(n) ? t.at(n)->spec.dtype : DType::kBool;
  };
  auto shape = [&](const std::string& n) {
    EXPECT_TRUE(t.count(n)) << n;
    return t.count(n) ? t.at(n)->spec.shape : std::vector<int64_t>{};
  };
  // FP8 with 128x128 block scales (MODEL_SPEC section 3's examples).
  const std::string a = "model.layers.5.self_attn.";
  const std::map<std::string, std::vector<int64_t>> scales = {
      {a + "q_a_proj.weight", {16, 48}},           {a + "q_b_proj.weight", {128, 16}},
      {a + "kv_a_proj_with_mqa.weight", {5, 48}},  {a + "kv_b_proj.weight", {224, 4}},
      {a + "o_proj.weight", {48, 128}},            {a + "indexer.wq_b.weight", {32, 16}},
      {a + "indexer.wk.weight", {1, 48}},          {"model.layers.5.mlp.experts.17.gate_proj.weight", {16, 48}},
      {"model.layers.5.mlp.experts.17.down_proj.weight", {48, 16}},
      {"model.layers.0.mlp.gate_proj.weight", {96, 48}}, {"model.layers.0.mlp.down_proj.weight", {48, 96}},
      {"model.layers.78.mlp.experts.255.up_proj.weight", {16, 48}},
      {"model.layers.9.mlp.shared_experts.down_proj.weight", {48, 16}}};
  for (const auto& [name, s] : scales) {
    EXPECT_EQ(dtype(name), DType::kF8E4M3) << name;
    EXPECT_EQ(dtype(name + "_scale_inv"), DType::kF32) << name;
    EXPECT_EQ(shape(name + "_scale_inv"), s) << name;
  }
  // BF16 (no scale): embeddings, head, norms, router, weights_proj, MTP projections.
  for (const std::string n :
       {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight", "model.layers.5.input_layernorm.weight",
        "model.layers.5.self_attn.q_a_layernorm.weight", "model.layers.5.self_attn.indexer.k_norm.weight",
        "model.layers.5.self_attn.indexer.k_norm.bias", "model.layers.5.mlp.gate.weight",
        "model.layers.5.self_attn.indexer.weights_proj.weight", "model.layers.78.eh_proj.weight",
        "model.layers.78.enorm.weight", "model.layers.78.hnorm.weight", "model.layers.78.shared_head.norm.weight"}) {
    EXPECT_EQ(dtype(n), DType::kBF16) << n;
    EXPECT_FALSE(t.count(n + "_scale_inv")) << n;
  }
  EXPECT_EQ(dtype("model.layers.5.mlp.gate.e_score_correction_bias"), DType::kF32);
  EXPECT_EQ(shape("model.layers.78.eh_proj.weight"), std::vector<int64_t>({6144, 12288}));
  EXPECT_EQ(shape("lm_head.weight"), std::vector<int64_t>({154880, 6144}));
  // No MTP copies of the embedding and head in GLM-5.x.
  EXPECT_FALSE(t.count("model.layers.78.embed_tokens.weight"));
  EXPECT_FALSE(t.count("model.layers.78.shared_head.head.weight"));
  EXPECT_FALSE(t.count("model.layers.2.mlp.gate.weight"));  // dense layer
  EXPECT_TRUE(t.count("model.layers.2.self_attn.indexer.wk.weight"));
  // 76 MoE layers (3..77 and MTP 78) x 256 experts x 3 matrices x (weight + scale).
  int experts = 0;
  for (const auto& x : p.tensors) experts += x.expert >= 0;
  EXPECT_EQ(experts, 76 * 256 * 3 * 2);
  // Every indexers_proj entry of the shipped list matches nothing; nothing else is unmatched.
  EXPECT_EQ(p.unmatched_exclusions.size(), 79u);
  for (const auto& e : p.unmatched_exclusions) EXPECT_NE(e.find("indexers_proj"), std::string::npos) << e;
  // Size and shards: ~756 GB in 5 GB shards; only the resident ~21 GB is written.
  EXPECT_GT(p.total_bytes, 750e9);
  EXPECT_LT(p.total_bytes, 760e9);
  EXPECT_GT(p.written_bytes, 19e9);
  EXPECT_LT(p.written_bytes, 23e9);
  EXPECT_GE(p.shard_files.size(), 150u);
  EXPECT_LE(p.shard_files.size(), 153u);
  EXPECT_EQ(p.shard_files[0], absl::StrCat("model-00001-of-00", p.shard_files.size(), ".safetensors"));
  uint64_t params = 0;
  for (const auto& x : p.tensors)
    if (x.fill != SynthTensor::Fill::kFp8Scales) {
      uint64_t n = 1;
      for (int64_t d : x.spec.shape) n *= d;
      params += n;
    }
  // 743.9B parameters without the MTP layer (transformers' count) + ~10.8B in it.
  EXPECT_GT(params, 753e9);
  EXPECT_LT(params, 756e9);
}

TEST(SynthPlanTest, Glm52HasIndexerTensorsOnlyOnFullLayersAndMtp) {
  const SynthPlan p = Plan("glm-5.2");
  EXPECT_DOUBLE_EQ(p.config.rope.theta, 8e6);
  EXPECT_EQ(p.config.moe_router_dtype, "float32");
  EXPECT_TRUE(p.config.index_share_for_mtp_iteration);
  std::set<int> with_indexer;
  for (const auto& t : p.tensors)
    if (t.spec.name.find(".self_attn.indexer.wq_b.weight") != std::string::npos &&
        t.spec.name.find("_scale_inv") == std::string::npos)
      with_indexer.insert(t.layer);
  std::set<int> want = {0, 1, 2, 78};
  for (int l = 6; l <= 74; l += 4) want.insert(l);
  EXPECT_EQ(with_indexer, want);
  EXPECT_EQ(want.size(), 22u);  // 21 "full" layers + the MTP layer
  EXPECT_EQ(p.unmatched_exclusions.size(), 22u);
}

TEST(SynthPlanTest, DeepseekV3CarriesMtpCopiesAndNoIndexer) {
  const SynthPlan p = Plan("deepseek-v3");
  auto t = ByName(p);
  EXPECT_EQ(p.config.n_group, 8);
  EXPECT_EQ(p.config.rope.type, "yarn");
  ASSERT_TRUE(t.count("model.layers.61.embed_tokens.weight"));
  ASSERT_TRUE(t.count("model.layers.61.shared_head.head.weight"));
  EXPECT_EQ(t.at("model.layers.61.shared_head.head.weight")->spec.dtype, DType::kBF16);
  EXPECT_EQ(t.at("model.layers.10.self_attn.q_b_proj.weight")->spec.shape, std::vector<int64_t>({128 * 192, 1536}));
  EXPECT_EQ(t.at("model.layers.10.self_attn.q_b_proj.weight")->spec.dtype, DType::kF8E4M3);
  EXPECT_EQ(t.at("model.layers.10.mlp.gate.weight")->spec.dtype, DType::kBF16);
  for (const auto& x : p.tensors) EXPECT_EQ(x.spec.name.find("indexer"), std::string::npos) << x.spec.name;
  EXPECT_TRUE(p.unmatched_exclusions.empty());
  EXPECT_GT(p.total_bytes, 680e9);  // ~671B + MTP parameters, FP8
}

TEST(SynthPlanTest, ExclusionEntriesArePrefixesAtModuleBoundaries) {
  // "mlp.gate" names the router: it must not swallow mlp.gate_proj; a whole
  // attention block excluded by its prefix becomes BF16.
  auto text = BuiltinConfig("glm-5");
  ASSERT_TRUE(text.ok());
  auto j = nlohmann::json::parse(*text);
  j["quantization_config"]["modules_to_not_convert"] = {"model.layers.0.mlp.gate", "model.layers.1.self_attn",
                                                        "lm_head", "model.embed_tokens"};
  auto p = PlanSynthCheckpoint(j.dump(), {});
  ASSERT_TRUE(p.ok()) << p.status().message();
  auto t = ByName(*p);
  EXPECT_EQ(t.at("model.layers.0.mlp.gate_proj.weight")->spec.dtype, DType::kF8E4M3);
  EXPECT_EQ(t.at("model.layers.1.self_attn.q_b_proj.weight")->spec.dtype, DType::kBF16);
  EXPECT_EQ(t.at("model.layers.1.self_attn.indexer.wk.weight")->spec.dtype, DType::kBF16);
  EXPECT_EQ(t.at("model.layers.2.self_attn.q_b_proj.weight")->spec.dtype, DType::kF8E4M3);
  EXPECT_EQ(p->unmatched_exclusions, std::vector<std::string>({"model.layers.0.mlp.gate"}));
}

TEST(SynthPlanTest, CuttingLayersKeepsPerLayerRules) {
  const SynthPlan p = Plan("glm-5.2", {{"num_hidden_layers", "4"}, {"n_routed_experts", "16"}});
  auto j = nlohmann::json::parse(p.config_json);
  EXPECT_EQ(j["indexer_types"].size(), 4u);
  EXPECT_EQ(j["mlp_layer_types"].size(), 4u);
  std::set<std::string> ex(j["quantization_config"]["modules_to_not_convert"].begin(),
                           j["quantization_config"]["modules_to_not_convert"].end());
  EXPECT_TRUE(ex.count("model.layers.4.mlp.gate"));  // the MTP layer's router, renumbered from 78
  EXPECT_TRUE(ex.count("model.layers.3.mlp.gate"));
  EXPECT_FALSE(ex.count("model.layers.5.mlp.gate"));
  EXPECT_FALSE(ex.count("model.layers.78.mlp.gate"));
  auto t = ByName(p);
  EXPECT_TRUE(t.count("model.layers.4.eh_proj.weight"));
  EXPECT_EQ(t.at("model.layers.4.mlp.gate.weight")->spec.dtype, DType::kBF16);
  EXPECT_FALSE(t.count("model.layers.3.self_attn.indexer.wk.weight"));  // "shared"
  EXPECT_FALSE(ApplyConfigOverrides("{\"num_hidden_layers\": 2, \"indexer_types\": [\"full\"]}",
                                    {{"num_hidden_layers", "3"}})
                   .ok());
  EXPECT_FALSE(ApplyConfigOverrides("[]", {}).ok());
}

TEST(SynthPlanTest, RefusesRealExpertLayersThatAreNotMoe) {
  auto text = BuiltinConfig("glm-5");
  ASSERT_TRUE(text.ok());
  SynthOptions o;
  o.real_expert_layers = {1};
  auto p = PlanSynthCheckpoint(*text, o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(std::string(p.status().message()).find("layer 1 is not a MoE layer"), std::string::npos)
      << p.status().message();
  o.real_expert_layers = {78};  // the MTP layer is one
  EXPECT_TRUE(PlanSynthCheckpoint(*text, o).ok());
  EXPECT_FALSE(BuiltinConfig("glm-6").ok());
}

std::vector<std::pair<std::string, std::string>> Narrow() { return testing_synth::NarrowGlm5(); }

TEST_F(SynthTest, CheckpointBytesDoNotDependOnThreadsAndContainerEqualsConvert) {
  SynthOptions o;
  o.real_expert_layers = {1};
  o.max_shard_bytes = 2 << 20;  // several shards, experts spanning them
  const SynthPlan p = Plan("glm-5", Narrow(), o);
  ASSERT_GT(p.shard_files.size(), 2u);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  ASSERT_TRUE(SynthesizeCheckpoint(p, o, (tmp_ / "one").string()).ok());
  omp_set_num_threads(std::max(2, threads));
  ASSERT_TRUE(SynthesizeCheckpoint(p, o, (tmp_ / "two").string()).ok());
  omp_set_num_threads(threads);
  for (const auto& f : p.shard_files)
    EXPECT_EQ(ReadAll((tmp_ / "one" / f).string()), ReadAll((tmp_ / "two" / f).string())) << f;
  // The checkpoint reads back: FP8 weights dequantize with their scales to values of the planned spread.
  auto r = SafetensorsReader::Open((tmp_ / "one").string());
  ASSERT_TRUE(r.ok()) << r.status().message();
  auto w = (*r)->ReadTensorF32("model.layers.0.self_attn.q_a_proj.weight");
  ASSERT_TRUE(w.ok());
  double ss = 0;
  for (float v : *w) ss += double(v) * v;
  EXPECT_NEAR(std::sqrt(ss / w->size()), 1.0 / 16.0, 0.01);  // 1/sqrt(256)
  auto hole = (*r)->ReadTensorF32("model.layers.2.mlp.experts.3.up_proj.weight");  // MTP layer: a hole
  ASSERT_TRUE(hole.ok());
  EXPECT_TRUE(std::all_of(hole->begin(), hole->end(), [](float v) { return v == 0; }));
  auto real = (*r)->ReadTensorF32("model.layers.1.mlp.experts.3.up_proj.weight");
  ASSERT_TRUE(real.ok());
  EXPECT_TRUE(std::any_of(real->begin(), real->end(), [](float v) { return v != 0; }));

  // --container (built just in time, inputs deleted) == convert of the checkpoint, byte for byte.
  ConvertOptions c;
  c.in_dir = (tmp_ / "one").string();
  c.out_dir = (tmp_ / "converted").string();
  auto conv = ConvertCheckpoint(c);
  ASSERT_TRUE(conv.ok()) << conv.status().message();
  ASSERT_TRUE(conv->complete);
  ConvertOptions c2;
  c2.out_dir = (tmp_ / "direct").string();
  auto direct = SynthesizeContainer(p, o, c2);
  ASSERT_TRUE(direct.ok()) << direct.status().message();
  ASSERT_TRUE(direct->convert.complete);
  EXPECT_FALSE(fs::exists(tmp_ / "direct" / ".synth-checkpoint"));
  for (const auto& e : fs::directory_iterator(tmp_ / "converted")) {
    const std::string name = e.path().filename().string();
    EXPECT_EQ(ReadAll(e.path().string()), ReadAll((tmp_ / "direct" / name).string())) << name;
  }
  // Zero (hole) experts: the MTP layer's 8 records; they stay holes in the container.
  int zero = 0, records = 0;
  for (const auto& s : conv->shards) zero += s.zero_records, records += s.records;
  EXPECT_EQ(records, 16);
  EXPECT_EQ(zero, 8);
  auto ct = Container::Open(c.out_dir);
  ASSERT_TRUE(ct.ok()) << ct.status().message();
  AlignedBuffer buf;
  const ExpertRecordInfo* zr = (*ct)->FindExpert(2, 5);
  ASSERT_NE(zr, nullptr);
  auto bytes = (*ct)->ReadRecord(*zr, &buf);  // CRC checked
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  EXPECT_TRUE(std::all_of(bytes->begin(), bytes->end(), [](uint8_t b) { return b == 0; }));
  const ExpertRecordInfo* rr = (*ct)->FindExpert(1, 5);
  ASSERT_NE(rr, nullptr);
  auto rbytes = (*ct)->ReadRecord(*rr, &buf);
  ASSERT_TRUE(rbytes.ok()) << rbytes.status().message();
  EXPECT_TRUE(std::any_of(rbytes->begin(), rbytes->end(), [](uint8_t b) { return b != 0; }));
  uint64_t disk = 0, apparent = 0;
  for (const auto& f : (*ct)->info().shards) {
    disk += DiskBytes((tmp_ / "converted" / f).string());
    apparent += fs::file_size(tmp_ / "converted" / f);
  }
  uint64_t zero_bytes = 0;
  for (int e = 0; e < 8; ++e) zero_bytes += (*ct)->FindExpert(2, e)->length;
  EXPECT_LT(disk + zero_bytes * 9 / 10, apparent) << "zero records must not take disk";
}

TEST_F(SynthTest, ContainerSynthesisResumesAfterAnInterruption) {
  SynthOptions o;
  o.max_shard_bytes = 2 << 20;
  const SynthPlan p = Plan("glm-5", Narrow(), o);
  ConvertOptions c;
  c.out_dir = (tmp_ / "c").string();
  c.max_shards = 1;  // stop early, as a kill between shards would
  auto first = SynthesizeContainer(p, o, c);
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_FALSE(first->convert.complete);
  c.max_shards = -1;
  auto rest = SynthesizeContainer(p, o, c);
  ASSERT_TRUE(rest.ok()) << rest.status().message();
  EXPECT_TRUE(rest->convert.complete);
  EXPECT_EQ(rest->convert.shards_verified, 1);
  ConvertOptions once;
  once.out_dir = (tmp_ / "once").string();
  ASSERT_TRUE(SynthesizeContainer(p, o, once).ok());
  for (const auto& f : p.shard_files)
    EXPECT_EQ(ReadAll((tmp_ / "c" / f).string()), ReadAll((tmp_ / "once" / f).string())) << f;
}

}  // namespace
}  // namespace moe

namespace moe {
namespace {

// Pages of [p, p + n) in RAM (mincore over the page-aligned span).
size_t ResidentPages(const void* p, size_t n) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{4095};
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + n + 4095) & ~uintptr_t{4095};
  std::vector<unsigned char> v((b - a) / 4096);
  if (::mincore(reinterpret_cast<void*>(a), b - a, v.data()) != 0) return SIZE_MAX;
  size_t r = 0;
  for (unsigned char c : v) r += c & 1;
  return r;
}

TEST_F(SynthTest, ResidentChecksRunOncePerShardAndSkipTheEmbedding) {
  SynthOptions o;
  o.max_shard_bytes = 2 << 20;
  auto cfg = ApplyConfigOverrides(*BuiltinConfig("glm-5"), testing_synth::NarrowGlm5());
  ASSERT_TRUE(cfg.ok());
  auto p = PlanSynthCheckpoint(*cfg, o);
  ASSERT_TRUE(p.ok());
  ConvertOptions c;
  c.out_dir = (tmp_ / "c").string();
  ASSERT_TRUE(SynthesizeContainer(*p, o, c).ok());
  auto map_all = [&](const Container& ct) {
    for (const auto& t : ct.tensors())
      if (t.expert < 0) {
        ASSERT_TRUE(ct.MapTensor(t).ok()) << t.name;
      }
  };
  // Two processes' worth of containers starting at once: one checks each shard, the other waits and finds the stamp.
  auto a = Container::Open(c.out_dir), b = Container::Open(c.out_dir);
  ASSERT_TRUE(a.ok() && b.ok());
  std::thread ta([&] { map_all(**a); }), tb([&] { map_all(**b); });
  ta.join();
  tb.join();
  const int shards = static_cast<int>((*a)->info().shards.size());
  std::set<int> with_resident;
  for (const auto& t : (*a)->tensors())
    if (t.expert < 0) with_resident.insert(t.file);
  const auto sa = (*a)->verify_stats(), sb = (*b)->verify_stats();
  EXPECT_EQ(sa.shards_checked + sb.shards_checked, static_cast<int>(with_resident.size()));
  EXPECT_EQ(sa.shards_stamped + sb.shards_stamped, static_cast<int>(with_resident.size()));
  EXPECT_GT(shards, 1);
  // A later process checks nothing.
  auto later = Container::Open(c.out_dir);
  ASSERT_TRUE(later.ok());
  map_all(**later);
  EXPECT_EQ((*later)->verify_stats().shards_checked, 0);
  EXPECT_EQ((*later)->verify_stats().bytes_checked, 0u);
  // The embedding table was dropped from the page cache by the check; a mapped row faults in on use.
  const ContainerTensor* emb = (*later)->Find("model.embed_tokens.weight");
  ASSERT_NE(emb, nullptr);
  auto m = (*later)->MapTensor(*emb);
  ASSERT_TRUE(m.ok());
  EXPECT_LE(ResidentPages(m->data, emb->data_bytes), 2u);
  // A shard that changes (mtime) is checked again.
  const std::string shard = (*later)->file_path(emb->file);
  fs::last_write_time(shard, fs::last_write_time(shard) + std::chrono::seconds(5));
  auto again = Container::Open(c.out_dir);
  ASSERT_TRUE(again.ok());
  map_all(**again);
  EXPECT_EQ((*again)->verify_stats().shards_checked, 1);
}

}  // namespace
}  // namespace moe
