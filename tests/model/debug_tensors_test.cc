// Layer-by-layer comparison with HF's intermediate tensors (debug.safetensors):
// localizes a numerics difference to the first op that diverges.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "tests/model/oracle_util.h"

namespace moe {
namespace {

class DebugTensorsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DebugTensorsTest, MatchHfIntermediates) {
  const std::string dir = testing::OracleDir(GetParam());
  if (!testing::HaveOracle(GetParam())) GTEST_SKIP() << "no oracle goldens for " << GetParam();
  auto g = testing::LoadGoldens(GetParam());
  auto dbg = SafetensorsReader::Open(dir + "/debug.safetensors");
  ASSERT_TRUE(dbg.ok()) << dbg.status();
  auto eng = Engine::Open(dir, EngineConfig{});
  ASSERT_TRUE(eng.ok()) << eng.status();
  std::map<std::string, std::vector<float>> ours;
  std::vector<std::string> order;
  (*eng)->mutable_model().set_trace([&](const std::string& n, const float* d, int64_t k) {
    if (!ours.count(n)) order.push_back(n);
    ours[n].assign(d, d + k);
  });
  const auto ids = testing::Ids(g["debug"]["ids"]);
  KvCache cache = (*eng)->NewCache();
  auto r = (*eng)->mutable_model().Forward(ids, cache, true);
  ASSERT_TRUE(r.ok()) << r.status();
  int compared = 0;
  for (const auto& name : order) {
    const TensorInfo* t = (*dbg)->Find(name);
    if (t == nullptr) continue;
    std::vector<float> ref(t->numel());
    ASSERT_TRUE((*dbg)->ReadTensorF32(*t, ref.data()).ok());
    const auto& v = ours[name];
    ASSERT_EQ(v.size(), ref.size()) << name;
    double maxd = 0, maxr = 0;
    int64_t diff = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      maxd = std::max(maxd, static_cast<double>(std::abs(v[i] - ref[i])));
      maxr = std::max(maxr, static_cast<double>(std::abs(ref[i])));
      diff += v[i] != ref[i];
    }
    ++compared;
    // bf16 activations: allow a few ulp-level differences, nothing systematic.
    EXPECT_LE(maxd, 0.02 * std::max(1.0, maxr)) << name << " max diff " << maxd << " (|ref| max " << maxr << ", "
                                                << diff << "/" << v.size() << " differ)";
  }
  EXPECT_GT(compared, 10);
}

INSTANTIATE_TEST_SUITE_P(Oracle, DebugTensorsTest, ::testing::Values("glm-short", "glm-dsa", "deepseek-v3"),
                         [](const auto& i) {
                           std::string s = i.param;
                           for (char& c : s) {
                             if (c == '-') c = '_';
                           }
                           return s;
                         });

}  // namespace
}  // namespace moe
