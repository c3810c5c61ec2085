// The serving plan (common/model/serving_planner.h) on a narrow GLM-5 container
// made by moe synth: it counts what the loader takes, splits shared mapped
// bytes from per-worker copies, sizes the context and the expert cache,
// derives per-token bytes and the floor, refuses what does not fit naming
// the part, and round-trips through its JSON form.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "common/format/container.h"
#include "common/format/synth_model.h"
#include "common/model/engine.h"
#include "common/model/serving_planner.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/format/synth_fixture.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

class ServingPlanTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("moe_serving_plan_test_" + std::to_string(::getpid())));
    fs::remove_all(*dir_);
    for (const char* name : {"a", "b"}) {
      auto text = BuiltinConfig("glm-5");
      ASSERT_TRUE(text.ok());
      auto overrides = testing_synth::NarrowGlm5();
      if (std::string(name) == "b") overrides.push_back({"n_routed_experts", "16"});
      auto cfg = ApplyConfigOverrides(*text, overrides);
      ASSERT_TRUE(cfg.ok());
      SynthOptions o;
      o.real_expert_layers = {1};
      auto plan = PlanSynthCheckpoint(*cfg, o);
      ASSERT_TRUE(plan.ok()) << plan.status().message();
      ConvertOptions c;
      c.out_dir = (*dir_ / name).string();
      auto r = SynthesizeContainer(*plan, o, c);
      ASSERT_TRUE(r.ok()) << r.status().message();
    }
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static PlanRequest Request(uint64_t ram) {
    PlanRequest r;
    r.model_dir = (*dir_ / "a").string();
    r.ram_bytes = ram;
    r.mem_gbps = 10;  // given: no measurement, deterministic
    r.disk_gbps = 2;
    r.process_overhead_bytes = 64 << 20;
    r.prefill_pass_bytes = 8 << 20;  // planned prefill's pass: small, like the rest of this toy budget
    r.reserve_bytes = 0;
    return r;
  }
  static fs::path* dir_;
};
fs::path* ServingPlanTest::dir_ = nullptr;

TEST_F(ServingPlanTest, CountsWhatTheLoaderTakes) {
  auto p = MakeServingPlan(Request(1ull << 30));
  ASSERT_TRUE(p.ok()) << p.status().message();
  EngineConfig ec;
  auto ep = Engine::Plan(p->model_dir, ec);
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  // Everything the loader allocates or maps: shared + per-worker copies + the (mapped, non-resident) embedding.
  EXPECT_EQ(p->shared_bytes + p->private_bytes + p->embedding_bytes, ep->resident_bytes);
  EXPECT_EQ(p->kv_bytes_per_token, ep->kv_bytes_per_token);
  EXPECT_GT(p->private_bytes, 0);  // the indexer's weights_proj is stored q8 and widened to f32 at load
  EXPECT_LT(p->private_bytes, p->shared_bytes / 10);
  EXPECT_EQ(p->embedding_row_bytes, p->embedding_bytes / 512);
  EXPECT_EQ(p->moe_layers, 1);
  EXPECT_EQ(p->expert_records, 8);
  EXPECT_EQ(p->context, kDefaultContext);
  EXPECT_EQ(p->max_position_embeddings, 202752);
  // The per-token sums: every non-MTP resident matrix once, one embedding row,
  // KV reads (DSA: every indexer key, all latents below index_topk), the experts.
  int64_t dense = 0;
  for (const auto& [g, part] : p->resident)
    if (g != "mtp" && g != "embeddings") dense += part.bytes;
  const int64_t T = p->context;
  // 2 layers, f32 latents; the container's kv_b is int8, so index keys are int8 + a scale (auto).
  EXPECT_EQ(p->index_keys, "q8");
  const int64_t kv = (128 + 64) * 4 * 2 * std::min<int64_t>(T, 2048) + (128 + 4) * 2 * T;
  EXPECT_EQ(p->kv_read_bytes_per_token, kv);
  EXPECT_EQ(p->kv_bytes_per_token, (128 + 64) * 4 * 2 + (128 + 4) * 2);
  PlanRequest exact = Request(1ull << 30);
  exact.index_keys = IndexKeys::kExact;
  auto pe = MakeServingPlan(exact);
  ASSERT_TRUE(pe.ok()) << pe.status().message();
  EXPECT_EQ(pe->index_keys, "exact");
  EXPECT_EQ(pe->kv_bytes_per_token, (128 + 64 + 128) * 4 * 2);
  ec.index_keys = IndexKeys::kExact;
  EXPECT_EQ(pe->kv_bytes_per_token, Engine::Plan(p->model_dir, ec)->kv_bytes_per_token);
  EXPECT_EQ(p->ram_bytes_per_token, dense + p->embedding_row_bytes + kv + p->expert_ram_bytes_per_token);
  EXPECT_EQ(p->expert_ram_bytes_per_token + p->disk_bytes_per_token, 2 * p->expert_record_bytes);  // top-2, 1 layer
  const double t_ram = p->ram_bytes_per_token / 10e9, t_disk = p->disk_bytes_per_token / 2e9;
  EXPECT_NEAR(p->floor_tokens_per_second, 1 / std::max(t_ram, t_disk), 1e-9);
  EXPECT_NEAR(p->floor_serial_tokens_per_second, 1 / (t_ram + t_disk), 1e-9);
  EXPECT_LE(p->TotalBytes(), int64_t{1} << 30);
}

TEST_F(ServingPlanTest, ContextAndCacheTradeInTheBudget) {
  auto small = MakeServingPlan(Request(300ull << 20));
  ASSERT_TRUE(small.ok()) << small.status().message();
  PlanRequest r = Request(300ull << 20);
  r.context = 1000;
  auto fixed = MakeServingPlan(r);
  ASSERT_TRUE(fixed.ok()) << fixed.status().message();
  EXPECT_EQ(fixed->context, 1000);
  // The expert cache gets what the context leaves, capped at all experts.
  EXPECT_EQ(fixed->expert_cache_bytes,
            std::min<int64_t>(fixed->expert_records * fixed->expert_record_bytes,
                              (300ll << 20) - fixed->shared_bytes - fixed->private_bytes - fixed->overhead_bytes -
                                  1000 * fixed->kv_bytes_per_token));
  EXPECT_GE(fixed->expert_cache_bytes, fixed->expert_cache_min_bytes);
  EXPECT_LE(fixed->context_max * fixed->kv_bytes_per_token,
            (300ll << 20) - fixed->shared_bytes - fixed->private_bytes - fixed->overhead_bytes -
                fixed->expert_cache_min_bytes);
  // Skewed routing: a cache of a few experts hits more than its share.
  r.expert_popularity = {100, 50, 30, 20, 10, 5, 3, 2};
  r.context = fixed->context_max;
  auto skew = MakeServingPlan(r);
  ASSERT_TRUE(skew.ok()) << skew.status().message();
  const int64_t slots = skew->expert_cache_bytes / skew->expert_record_bytes;
  ASSERT_GE(slots, 1);
  ASSERT_LT(slots, 8);
  double top = 0;
  for (int i = 0; i < slots; ++i) top += r.expert_popularity[i];
  EXPECT_NEAR(skew->hit_rate, top / 220.0, 1e-12);
  EXPECT_GT(skew->hit_rate, slots / 8.0);
}

TEST_F(ServingPlanTest, RefusesWhatDoesNotFitNamingThePart) {
  auto tiny = MakeServingPlan(Request(64ull << 20));
  ASSERT_FALSE(tiny.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(tiny.status()));
  const std::string m(tiny.status().message());
  EXPECT_NE(m.find("the resident weights take"), std::string::npos) << m;
  EXPECT_NE(m.find("attention"), std::string::npos) << m;
  EXPECT_NE(m.find("minimum expert cache"), std::string::npos) << m;
  EXPECT_NE(m.find("moe convert --policy dense-int4"), std::string::npos) << m;
  PlanRequest r = Request(300ull << 20);
  r.context = 200000;
  auto ctx = MakeServingPlan(r);
  ASSERT_FALSE(ctx.ok());
  EXPECT_NE(std::string(ctx.status().message()).find("the KV cache for 200000 tokens"), std::string::npos)
      << ctx.status().message();
  r.context = 300000;
  auto past = MakeServingPlan(r);
  ASSERT_FALSE(past.ok());
  EXPECT_NE(std::string(past.status().message()).find("exceeds the model's 202752 positions"), std::string::npos);
  r.context = -1;
  r.workers = 2;
  EXPECT_FALSE(MakeServingPlan(r).ok());  // several workers need the shared expertd
  r.expertd = true;
  auto two = MakeServingPlan(r);
  ASSERT_TRUE(two.ok()) << two.status().message();
  // expertd's floor (top-2 slabs of each record size: q4 main layer, q8 MTP layer) + top-2 for the 2nd worker.
  auto ct = Container::Open(two->model_dir);
  ASSERT_TRUE(ct.ok());
  const uint64_t mtp_record = (*ct)->FindExpert(2, 0)->length;
  EXPECT_GT(mtp_record, static_cast<uint64_t>(two->expert_record_bytes));
  EXPECT_EQ(two->expert_cache_min_bytes,
            2 * (two->expert_record_bytes + static_cast<int64_t>(mtp_record)) + 2 * two->expert_record_bytes);
  PlanRequest none = Request(0);
  EXPECT_FALSE(MakeServingPlan(none).ok());
}

TEST_F(ServingPlanTest, JsonRoundTripAndModelCheck) {
  auto p = MakeServingPlan(Request(1ull << 30));
  ASSERT_TRUE(p.ok()) << p.status().message();
  auto back = ParseServingPlan(p->ToJson(), "plan.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->ToJson(), p->ToJson());
  // Planned prefill: the pass budget, capped at the context's rows, and the rows it holds.
  EXPECT_GT(back->prefill_row_bytes, 0);
  EXPECT_GT(back->prefill_pass_rows, 0);
  EXPECT_EQ(back->prefill_pass_rows, back->prefill_pass_bytes / back->prefill_row_bytes);
  EXPECT_LE(back->prefill_pass_bytes, int64_t{8} << 20);
  EXPECT_TRUE(CheckPlanMatchesModel(*back, p->model_dir).ok());
  auto other = CheckPlanMatchesModel(*back, (*dir_ / "b").string());
  ASSERT_FALSE(other.ok());
  EXPECT_NE(std::string(other.message()).find("run moe plan for this model"), std::string::npos) << other.message();
  EXPECT_FALSE(ParseServingPlan("{}", "x.json").ok());
  EXPECT_FALSE(ParseServingPlan("{\"kind\": \"moestream-serving-plan\", \"version\": 1}", "x.json").ok());
  EXPECT_FALSE(LoadServingPlan((*dir_ / "missing.json").string()).ok());
  // A plan from before index_keys existed kept them exact; an unknown value is refused by name.
  nlohmann::json j = nlohmann::json::parse(p->ToJson());
  j["request"].erase("index_keys");
  auto old = ParseServingPlan(j.dump(), "old.json");
  ASSERT_TRUE(old.ok()) << old.status().message();
  EXPECT_EQ(old->index_keys, "exact");
  j["request"]["index_keys"] = "fp8";
  auto bad = ParseServingPlan(j.dump(), "bad.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("index_keys 'fp8'"), std::string::npos);
}

}  // namespace
}  // namespace moe
