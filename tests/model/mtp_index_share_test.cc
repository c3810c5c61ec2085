// index_share_for_mtp_iteration (MODEL_SPEC section 5): with the flag, the
// recursive draft steps of an MTP round reuse the round's step-0 top-k of the
// MTP layer's own indexer (plus the positions drafted since) instead of
// scoring every cached index key; without it every draft row is scored. The
// count of scored rows (StepProfile::indexer_scored_rows) tells them apart.
#include <gtest/gtest.h>

#include <fstream>

#include "common/model/engine.h"
#include "common/model/spec_mtp.h"
#include "nlohmann/json.hpp"
#include "tests/model/tiny_checkpoint.h"

namespace moe {
namespace {

struct Drafted {
  std::vector<int32_t> drafts;
  int64_t scored = 0;
};

Drafted Draft(bool share, int k) {
  const std::string dir =
      std::string(MOE_BINARY_DIR) + "/tests/model/tiny_mtp_share_" + (share ? "on" : "off");
  testing::WriteTinyCheckpoint(dir, testing::TinySpec{});  // index_topk 6: a 12-token context is selected from
  {
    std::ifstream in(dir + "/config.json");
    nlohmann::json c = nlohmann::json::parse(in);
    c["index_share_for_mtp_iteration"] = share;
    std::ofstream(dir + "/config.json") << c.dump();
  }
  auto e = Engine::Open(dir, EngineConfig{});
  EXPECT_TRUE(e.ok()) << e.status();
  Model& m = (*e)->mutable_model();
  const std::vector<int32_t> ids = {5, 9, 14, 3, 27, 40, 2, 8, 17, 33, 21, 60};
  KvCache cache = (*e)->NewCache();
  BatchSeq one{ids, &cache, false, true, /*all_hidden=*/true};
  auto f = m.ForwardBatch(std::span<const BatchSeq>(&one, 1));
  EXPECT_TRUE(f.ok()) << f.status();
  MtpDrafter d(m, KvDtype::kF32, false);
  d.AddHidden(0, (*f)[0].hidden);
  StepProfile p;
  m.set_profile(&p);
  auto drafts = d.Draft(ids, 11, k);
  m.set_profile(nullptr);
  EXPECT_TRUE(drafts.ok()) << drafts.status();
  return {*drafts, p.indexer_scored_rows};
}

TEST(MtpIndexShare, LaterDraftStepsReuseStepZeroTopK) {
  const int k = 4;
  const Drafted off = Draft(false, k), on = Draft(true, k);
  ASSERT_EQ(off.drafts.size(), static_cast<size_t>(k));
  ASSERT_EQ(on.drafts.size(), static_cast<size_t>(k));
  // Step 0 extends the 12 committed slots (rows 6..11 have more keys than index_topk 6: scored);
  // each of the k - 1 recursive steps scores its row only without sharing.
  EXPECT_EQ(on.scored, 6);
  EXPECT_EQ(off.scored, 6 + (k - 1));
  // Step 0 is the same computation either way: so is the first draft.
  EXPECT_EQ(on.drafts[0], off.drafts[0]);
}

}  // namespace
}  // namespace moe
