#include "common/expertstore/policy.h"

#include <gtest/gtest.h>

#include <random>

#include "common/expertstore/cache_sim.h"
#include "tests/expertstore/synthetic_model.h"

namespace moe::expertstore {
namespace {

TEST(HeatPolicy, FrequencyBeatsOneRecentAccessAndDecays) {
  HeatPolicy p(1, 4, PolicyConfig{1, 8, 0.5, 1.0});  // half-lives 8 and 0.5 accesses
  for (int i = 0; i < 5; ++i) p.Touch(0);
  p.Touch(1);
  EXPECT_TRUE(p.EvictBefore(1, 0));  // 1 access < 5 accesses
  EXPECT_NEAR(p.Heat(1), 2.0, 1e-9);  // slow 1 + alpha x fast 1
  for (int i = 0; i < 80; ++i) p.Touch(2);  // 10 half-lives later
  EXPECT_LT(p.Heat(0), 0.01);
  EXPECT_TRUE(p.EvictBefore(0, 2));
  EXPECT_TRUE(p.EvictBefore(3, 1));  // never accessed is coldest
}

TEST(HeatPolicy, AdmissionRefusesSpeculativeFillsOverHotterVictims) {
  HeatPolicy p(1, 4, PolicyConfig{1, 1000, 1, 1.0});
  for (int i = 0; i < 10; ++i) p.Touch(0);
  p.Touch(1);
  EXPECT_FALSE(p.Admits(1, true, p.Score(0)));
  EXPECT_TRUE(p.Admits(0, true, p.Score(1)));
  EXPECT_TRUE(p.Admits(1, false, p.Score(0)));  // demand fills always evict
}

TEST(HeatPolicy, LearnsTheRecencyBonusFromTheWorkload) {
  // 1 layer x 64 experts, 8 accesses per token, window 1 token.
  PolicyConfig c{8, 64, 0.5, 40.0, 1.0, true};
  HeatPolicy sticky(1, 64, c), uniform(1, 64, c);
  std::mt19937_64 rng(3);
  std::vector<uint32_t> set(8);
  for (int t = 0; t < 4000; ++t) {
    // Sticky: a new random set of 8 every 4 tokens, repeated in between.
    if (t % 4 == 0)
      for (auto& k : set) k = uint32_t(rng() % 64);
    for (uint32_t k : set) sticky.Touch(k);
    // Uniform: 8 independent draws per token; reuse is only the base rate.
    for (int i = 0; i < 8; ++i) uniform.Touch(uint32_t(rng() % 64));
  }
  EXPECT_GT(sticky.alpha(), 4 * uniform.alpha()) << sticky.alpha() << " vs " << uniform.alpha();
  EXPECT_LT(uniform.alpha(), 40.0);  // learned, not the start value
  // A key used in the last token outranks one with the same count used long ago.
  HeatPolicy p(1, 64, PolicyConfig{8, 64, 0.5, 10.0, 1.0, false});
  p.Touch(0);
  for (int i = 0; i < 40; ++i) p.Touch(2);
  p.Touch(1);
  EXPECT_TRUE(p.EvictBefore(0, 1));
  EXPECT_NEAR(p.Score(1), 1.0 + 10.0, 1e-9);
}

TEST(HeatPolicy, PersistsAndRefusesAnotherModel) {
  std::string dir = testing::MakeTempDir("heat");
  HeatPolicy p(2, 3);
  for (int i = 0; i < 7; ++i) p.Touch(p.index(1, 2));
  p.SetPinned(p.index(0, 1), true);
  ASSERT_TRUE(p.Save(dir + "/heat.bin", "model-A").ok());
  HeatPolicy q(2, 3);
  ASSERT_TRUE(q.Load(dir + "/heat.bin", "model-A").ok());
  EXPECT_NEAR(q.Heat(q.index(1, 2)), 7.0, 0.1);  // the frequency term survives, recency does not
  EXPECT_TRUE(q.pinned(q.index(0, 1)));
  HeatPolicy r(2, 3);
  auto s = r.Load(dir + "/heat.bin", "model-B");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(s.message()).find("model-A"), std::string::npos);
  EXPECT_EQ(r.Heat(r.index(1, 2)), 0.0);
  HeatPolicy wrong_shape(3, 3);
  EXPECT_EQ(wrong_shape.Load(dir + "/heat.bin", "model-A").code(), absl::StatusCode::kFailedPrecondition);
}

TEST(CacheSim, LruAndBeladyOnAKnownSequence) {
  RoutingTrace t;
  t.num_layers = 1;
  t.num_experts = 4;
  t.top_k = 1;
  // a b c a b d a b c: capacity 2.
  t.keys = {0, 1, 2, 0, 1, 3, 0, 1, 2};
  EXPECT_EQ(SimulateLru(t, 2).hits, 0u);
  EXPECT_EQ(SimulateBelady(t, 2).hits, 4u);  // keeps a, b
  EXPECT_EQ(SimulateLru(t, 4).hits, 5u);     // only compulsory misses
  EXPECT_EQ(SimulateBelady(t, 4).hits, 5u);
}

TEST(CacheSim, OrderingOnASkewedGlmShapedTrace) {
  SyntheticTraceConfig c;
  c.num_layers = 12;
  c.num_tokens = 600;
  auto t = MakeSyntheticTrace(c);
  ASSERT_EQ(t.keys.size(), size_t(12) * 600 * 8);
  uint64_t slots = 12 * 256 / 5;  // 20% of the experts
  auto lru = SimulateLru(t, slots), heat = SimulateHeat(t, slots, PolicyConfig{}),
       opt = SimulateBelady(t, slots);
  EXPECT_LE(lru.hit_rate(), opt.hit_rate());
  EXPECT_LE(heat.hit_rate(), opt.hit_rate());
  EXPECT_GT(heat.hit_rate(), lru.hit_rate());  // frequency pays on skewed routing
}

TEST(CacheSim, TraceFileRoundTripsAndRejectsGarbage) {
  std::string dir = testing::MakeTempDir("trace");
  SyntheticTraceConfig c;
  c.num_layers = 3;
  c.num_experts = 16;
  c.top_k = 2;
  c.num_tokens = 10;
  auto t = MakeSyntheticTrace(c);
  ASSERT_TRUE(SaveTrace(t, dir + "/t.txt").ok());
  auto u = LoadTrace(dir + "/t.txt");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->keys, t.keys);
  EXPECT_EQ(u->num_tokens, 10u);
  FILE* f = std::fopen((dir + "/bad.txt").c_str(), "w");
  std::fputs("moestream-routing-trace 1 3 16 2\n0 1 3 99\n", f);
  std::fclose(f);
  auto b = LoadTrace(dir + "/bad.txt");
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(b.status().message()).find("expert 99"), std::string::npos);
}

}  // namespace
}  // namespace moe::expertstore
