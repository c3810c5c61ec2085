// With MTP drafts on, every sequence's state also holds the MTP drafter's rows
// (its own cache row and the main model's hidden state per token): the worker's
// admission counts them against the serving plan's KV (EngineModel::
// kv_bytes_per_token), so a request that fits without drafts can be refused with.
#include <gtest/gtest.h>

#include "common/model/engine.h"
#include "services/inferd/batcher.h"
#include "services/inferd/engine_model.h"
#include "tests/inferd/seq_collector.h"
#include "tests/model/tiny_checkpoint.h"

namespace moe {
namespace {

TEST(MtpBudget, DrafterRowsCountAgainstThePlansKv) {
  const std::string dir = std::string(MOE_BINARY_DIR) + "/tests/inferd/tiny_mtp_budget";
  testing::WriteTinyCheckpoint(dir, testing::TinySpec{});
  auto m = inferd::EngineModel::Open(dir, EngineConfig{}, 0);
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->engine().config();
  const int64_t kv = KvBytesPerToken(c, KvDtype::kF32, false);
  const int64_t mtp = MtpBytesPerToken(c, KvDtype::kF32, false);
  EXPECT_EQ(mtp, (c.kv_lora_rank + c.qk_rope_head_dim + c.index_head_dim + c.hidden_size) * 4);
  (*m)->set_kv_budget(100 * kv, kv);  // 100 tokens without drafts
  EXPECT_EQ((*m)->kv_bytes_per_token(), kv);
  ASSERT_TRUE((*m)->set_mtp_drafts(true).ok());
  EXPECT_EQ((*m)->kv_bytes_per_token(), kv + mtp);
  // The state's real bytes after feeding tokens match the per-token figure.
  auto st = (*m)->NewState();
  std::vector<int32_t> ids(10, 5);
  inferd::SequenceModel::Item it;
  it.state = st.get();
  it.tokens = ids;
  ASSERT_TRUE((*m)->Forward(std::span(&it, 1)).ok());
  EXPECT_EQ(st->bytes(), 10 * kv + 10 * c.hidden_size * 4);  // MTP cache rows come with the first draft
  inferd::Batcher b(m->get(), inferd::BatcherConfig{});
  inferd::SeqRequest r;
  r.id = "x";
  r.prompt.assign(60, 7);
  r.max_tokens = 30;  // 90 tokens: fits 100 x kv, not 90 x (kv + mtp)
  auto refused = b.Submit(r, [](inferd::SeqOutput) {});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.message()).find("KV"), std::string::npos) << refused;
  r.max_tokens = 1;
  r.prompt.assign(40, 7);
  inferd::testing::SeqCollector col;
  ASSERT_TRUE(b.Submit(r, col.Cb()).ok());
  col.Wait();
}

}  // namespace
}  // namespace moe

namespace moe {
namespace {

// A state saved with its MTP drafter (inferd's prefix disk tier) drafts at
// once after a restart, exactly as the original would; a bare KV file (a
// worker without drafts wrote it) resumes stale (no drafts); a damaged frame
// is refused as DataLoss.
TEST(MtpBudget, SavedStatesKeepTheirDrafter) {
  const std::string dir = std::string(MOE_BINARY_DIR) + "/tests/inferd/tiny_mtp_saved";
  testing::WriteTinyCheckpoint(dir, testing::TinySpec{});
  auto a = inferd::EngineModel::Open(dir, EngineConfig{}, 0);
  auto b = inferd::EngineModel::Open(dir, EngineConfig{}, 0);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->set_mtp_drafts(true).ok());
  ASSERT_TRUE((*b)->set_mtp_drafts(true).ok());
  const std::vector<int32_t> ids = {5, 9, 14, 3, 27, 40, 2, 8, 17, 33};
  auto st = (*a)->NewState();
  inferd::SequenceModel::Item it;
  it.state = st.get();
  it.tokens = ids;
  ASSERT_TRUE((*a)->Forward(std::span(&it, 1)).ok());
  auto bytes = (*a)->SerializeState(*st);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto want = (*a)->DraftMtp(*st, ids, 11, 3);
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_EQ(want->size(), 3u);
  auto resumed = (*b)->ParseState(*bytes, "saved.kvp");
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  auto got = (*b)->DraftMtp(**resumed, ids, 11, 3);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, *want);
  // Without a drafter the state is written as a bare KV file: resumed stale.
  auto c = inferd::EngineModel::Open(dir, EngineConfig{}, 0);
  ASSERT_TRUE(c.ok());
  auto plain = (*c)->NewState();
  it.state = plain.get();
  ASSERT_TRUE((*c)->Forward(std::span(&it, 1)).ok());
  auto plain_bytes = (*c)->SerializeState(*plain);
  ASSERT_TRUE(plain_bytes.ok());
  auto stale = (*b)->ParseState(*plain_bytes, "plain.kvp");
  ASSERT_TRUE(stale.ok()) << stale.status();
  auto none = (*b)->DraftMtp(**stale, ids, 11, 3);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  // A flipped byte anywhere in the frame: DataLoss naming the file.
  std::string bad = *bytes;
  bad[bad.size() / 2] ^= 0x40;
  auto refused = (*b)->ParseState(bad, "bad.kvp");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(std::string(refused.status().message()).find("bad.kvp"), std::string::npos);
}

}  // namespace
}  // namespace moe
