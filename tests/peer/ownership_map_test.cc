#include "services/peer/ownership_map.h"

#include <gtest/gtest.h>

#include "services/peer/peer_flags.h"

namespace moe::peer {
namespace {

const std::vector<bool> kLayers = {false, true, true, false};  // dense, 2 MoE, no MTP

TEST(OwnershipMap, UniformHeatIsRoundRobinAndRoundTrips) {
  OwnershipMap m = BalancedOwnership({"a:1", "b:2", "c:3"}, kLayers, 6, {}, 0.0, 4, "w");
  ASSERT_EQ(m.owner.size(), 4u);
  EXPECT_TRUE(m.owner[0].empty());
  EXPECT_EQ(m.owner[1], (std::vector<int>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(m.OwnedCounts(), (std::vector<int64_t>{4, 4, 4}));
  auto back = OwnershipMap::FromJson(m.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->owner, m.owner);
  EXPECT_EQ(back->epoch, 4u);
  EXPECT_TRUE(back->CheckModel("w", kLayers, 6).ok());
  EXPECT_EQ(m.HostFor(0, 1, 1), 1);
  EXPECT_EQ(m.HostFor(1, 1, 1), 1);
  EXPECT_EQ(m.HostFor(2, 0, 0), 2);  // a dense layer: nothing to send
}

TEST(OwnershipMap, HeatBalancesLoadAndReplicatesTheHottest) {
  std::vector<std::vector<double>> heat(4, std::vector<double>(4, 0.0));
  heat[1] = {100, 10, 9, 1};
  heat[2] = {1, 1, 1, 1};
  OwnershipMap m = BalancedOwnership({"a:1", "b:2"}, kLayers, 4, heat, 0.125, 1, "w");  // 1 of 8 replicated
  EXPECT_TRUE(m.replicated[1][0]);
  EXPECT_EQ(m.HostFor(0, 1, 0), 0);
  EXPECT_EQ(m.HostFor(1, 1, 0), 1);  // replicated: each host computes it itself
  // The rest of layer 1 by heat: 10 -> host 0, 9 -> host 1, 1 -> host 1 (9 < 10).
  EXPECT_EQ(m.owner[1][1], 0);
  EXPECT_EQ(m.owner[1][2], 1);
  EXPECT_EQ(m.owner[1][3], 1);
  auto back = OwnershipMap::FromJson(m.ToJson());
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->replicated[1][0]);
}

TEST(OwnershipMap, RefusesMalformedMapsByName) {
  const nlohmann::json good = BalancedOwnership({"a:1", "b:2"}, kLayers, 4, {}, 0.0, 1, "w").ToJson();
  auto refuse = [&](auto edit, const std::string& needle) {
    nlohmann::json j = good;
    edit(j);
    auto m = OwnershipMap::FromJson(j);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find(needle), std::string::npos) << m.status();
  };
  refuse([](nlohmann::json& j) { j["colour"] = 1; }, "unknown field 'colour'");
  refuse([](nlohmann::json& j) { j["format"] = "v0"; }, "'format'");
  refuse([](nlohmann::json& j) { j["epoch"] = 0; }, "'epoch'");
  refuse([](nlohmann::json& j) { j["hosts"] = {"a:1", "a:1"}; }, "listed twice");
  refuse([](nlohmann::json& j) { j["owner"][1][2] = 5; }, "owner[1][2]");
  refuse([](nlohmann::json& j) { j["replicated"] = {{0, 0}}; }, "outside 'owner'");
  refuse([](nlohmann::json& j) { j.erase("weights"); }, "'weights'");
  auto m = OwnershipMap::FromJson(good);
  ASSERT_TRUE(m.ok());
  EXPECT_NE(m->CheckModel("other", kLayers, 4).message().find("weights 'w'"), std::string::npos);
  EXPECT_NE(m->CheckModel("w", kLayers, 8).message().find("layer 1 lists 4 experts, the model 8"), std::string::npos);
  EXPECT_NE(m->CheckModel("w", {true, true}, 4).message().find("2 (MTP layer included)"), std::string::npos);
}

}  // namespace
}  // namespace moe::peer
