// Planned prefill on the real engine (batcher.h, "Planned prefill"): long
// prompts fed in layer-major passes give the same greedy tokens as 4-token
// chunks, read each routed expert once per pass instead of once per chunk,
// split a prompt longer than a pass into equal parts, let a decoding
// sequence advance between a pass's layers, and survive a member's
// cancellation mid-pass (the pass is abandoned, its states truncated back).
#include <gtest/gtest.h>

#include <atomic>
#include <set>

#include "common/model/engine.h"
#include "common/model/pass_memory.h"
#include "services/inferd/batcher.h"
#include "services/inferd/engine_model.h"
#include "tests/inferd/seq_collector.h"
#include "tests/model/tiny_checkpoint.h"

namespace moe {
namespace {

using inferd::testing::Greedy;

// One directory per test: ctest runs the tests as parallel processes, which
// must not write the same files at once.
std::string TinyDir() {
  static const std::string dir = [] {
    std::string d = inferd::testing::PerTestDir("tiny_planned_prefill");
    testing::WriteTinyCheckpoint(d, testing::TinySpec{});
    return d;
  }();
  return dir;
}

std::vector<int32_t> Prompt(int n, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((i * 31 + salt * 17 + 5) % 90);
  return p;
}

struct Served {
  std::vector<std::vector<int32_t>> tokens;
  inferd::BatcherStats stats;
};

// Submits the prompts back to back and collects each one's tokens (greedy:
// which steps or passes they share never changes them).
Served Serve(const inferd::BatcherConfig& bc, const std::vector<std::vector<int32_t>>& prompts, int n) {
  auto m = inferd::EngineModel::Open(TinyDir(), EngineConfig{}, 0);
  EXPECT_TRUE(m.ok()) << m.status();
  inferd::Batcher b(m->get(), bc);
  std::vector<std::unique_ptr<inferd::testing::SeqCollector>> cs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    cs.push_back(std::make_unique<inferd::testing::SeqCollector>());
    EXPECT_TRUE(b.Submit(Greedy(std::to_string(i), prompts[i], n), cs.back()->Cb()).ok());
  }
  Served r;
  for (auto& c : cs) {
    c->Wait();
    r.tokens.push_back(c->tokens);
  }
  r.stats = b.stats();
  return r;
}

inferd::BatcherConfig Chunked() {
  inferd::BatcherConfig bc;
  bc.prefill_chunk = 4;
  return bc;
}

inferd::BatcherConfig Planned(int64_t rows) {
  inferd::BatcherConfig bc = Chunked();
  bc.prefill_pass_rows = rows;
  bc.prefill_slice_seconds = 0;  // one layer per slice whenever anybody else waits
  return bc;
}

TEST(PlannedPrefill, SameGreedyTokensAsChunksAndEachExpertOncePerPass) {
  const std::vector<std::vector<int32_t>> prompts = {Prompt(60, 1), Prompt(45, 2)};
  // max_tokens 1: the prompt's forward alone (its fetches) and its first token.
  const Served chunked = Serve(Chunked(), prompts, 1);
  const Served planned = Serve(Planned(256), prompts, 1);
  EXPECT_EQ(planned.tokens, chunked.tokens);
  EXPECT_EQ(chunked.stats.prefill_passes, 0);
  EXPECT_GE(planned.stats.prefill_passes, 1);
  EXPECT_EQ(planned.stats.prefill_pass_rows, 60 + 45);
  // Chunks: every 4-token chunk fetches its experts again; a pass fetches
  // each (layer, expert) of its rows once: at most layers x experts.
  const int64_t moe_layers = 2, experts = 8;
  EXPECT_LE(planned.stats.expert_fetches, planned.stats.prefill_passes * moe_layers * experts);
  EXPECT_GT(planned.stats.expert_fetches, 0);  // a pass's fetches are counted like a step's
  EXPECT_LT(planned.stats.expert_fetches * 3, chunked.stats.expert_fetches)
      << "planned " << planned.stats.expert_fetches << " vs chunked " << chunked.stats.expert_fetches;
  // And the rest of the answer is unchanged too.
  EXPECT_EQ(Serve(Planned(256), prompts, 12).tokens, Serve(Chunked(), prompts, 12).tokens);
}

TEST(PlannedPrefill, APromptLongerThanAPassGoesInEqualParts) {
  const std::vector<std::vector<int32_t>> prompts = {Prompt(100, 3)};
  const Served chunked = Serve(Chunked(), prompts, 10);
  const Served planned = Serve(Planned(40), prompts, 10);
  EXPECT_EQ(planned.tokens, chunked.tokens);
  EXPECT_EQ(planned.stats.prefill_passes, 3);  // 34 + 33 + 33, not 40 + 40 + 20
  EXPECT_EQ(planned.stats.prefill_pass_rows, 100);
}

TEST(PlannedPrefill, ShortPromptsStillRideInSteps) {
  const std::vector<std::vector<int32_t>> prompts = {Prompt(4, 4), Prompt(3, 5)};
  const Served planned = Serve(Planned(256), prompts, 8);
  EXPECT_EQ(planned.tokens, Serve(Chunked(), prompts, 8).tokens);
  EXPECT_EQ(planned.stats.prefill_passes, 0);
}

// A decoding sequence gets a token between the layers of another's pass
// (slice 0: one layer per slice), and the pass still gives the chunked tokens.
TEST(PlannedPrefill, DecodeContinuesBetweenAPassLayers) {
  auto m = inferd::EngineModel::Open(TinyDir(), EngineConfig{}, 0);
  ASSERT_TRUE(m.ok()) << m.status();
  inferd::Batcher b(m->get(), Planned(256));
  std::atomic<int> a_tokens{0};
  std::atomic<int> a_at_long_first{-1}, a_at_long_submit{-1};
  std::mutex mu;
  std::condition_variable cv;
  inferd::testing::SeqCollector a_done, long_c;
  auto a_cb = a_done.Cb();
  // "a" must still be decoding when the long prompt's pass starts: 240 tokens
  // (with 60 it could finish while this thread was descheduled under ctest -j,
  // and the pass then had nobody to yield to).
  constexpr int kATokens = 240;
  ASSERT_TRUE(b.Submit(Greedy("a", Prompt(3, 6), kATokens),
                       [&](inferd::SeqOutput o) {
                         a_tokens += static_cast<int>(o.tokens.size());
                         cv.notify_all();
                         a_cb(std::move(o));
                       })
                  .ok());
  {
    std::unique_lock<std::mutex> l(mu);
    cv.wait_for(l, std::chrono::seconds(30), [&] { return a_tokens.load() >= 2; });
  }
  auto long_cb = long_c.Cb();
  a_at_long_submit = a_tokens.load();
  ASSERT_TRUE(b.Submit(Greedy("long", Prompt(80, 7), 4),
                       [&](inferd::SeqOutput o) {
                         if (a_at_long_first.load() < 0 && !o.tokens.empty()) a_at_long_first = a_tokens.load();
                         long_cb(std::move(o));
                       })
                  .ok());
  long_c.Wait();
  a_done.Wait();
  // 3 layers, one per slice, a step of "a" after each slice but the last.
  EXPECT_GE(a_at_long_first.load() - a_at_long_submit.load(), 2);
  EXPECT_EQ(b.stats().prefill_passes, 1);
  EXPECT_GE(b.stats().max_pass_slice_seconds, 0.0);
  EXPECT_EQ(long_c.tokens, Serve(Chunked(), {Prompt(80, 7)}, 4).tokens[0]);
  EXPECT_EQ(a_done.tokens, Serve(Chunked(), {Prompt(3, 6)}, kATokens).tokens[0]);
}

// A member cancelled mid-pass: the pass is abandoned (states truncated back),
// the cancelled one ends as cancelled, and the other member's tokens are
// exactly the chunked ones (it joins the next pass from its old length).
TEST(PlannedPrefill, CancelMidPassAbandonsItAndTheOthersAreUnchanged) {
  auto m = inferd::EngineModel::Open(TinyDir(), EngineConfig{}, 0);
  ASSERT_TRUE(m.ok()) << m.status();
  inferd::Batcher b(m->get(), Planned(256));
  inferd::testing::SeqCollector a_done, victim, other;
  auto a_cb = a_done.Cb();
  std::atomic<bool> cancelled{false};
  // "a" decodes throughout; its callback cancels the victim once a pass runs
  // (the callback comes after one layer of it: the pass is mid-way).
  ASSERT_TRUE(b.Submit(Greedy("a", Prompt(3, 8), 80),
                       [&](inferd::SeqOutput o) {
                         if (!cancelled && b.stats().prefill_pass_rows > 0) {
                           cancelled = true;
                           b.Cancel("victim");
                         }
                         a_cb(std::move(o));
                       })
                  .ok());
  ASSERT_TRUE(b.Submit(Greedy("victim", Prompt(70, 9), 4), victim.Cb()).ok());
  ASSERT_TRUE(b.Submit(Greedy("other", Prompt(50, 10), 6), other.Cb()).ok());
  victim.Wait();
  other.Wait();
  a_done.Wait();
  EXPECT_TRUE(cancelled.load());
  EXPECT_EQ(victim.fin.reason, inferd::EndReason::kCancelled);
  EXPECT_GE(b.stats().prefill_pass_aborts, 1);
  EXPECT_EQ(b.stats().max_steps_after_cancel, 0);
  EXPECT_EQ(other.tokens, Serve(Chunked(), {Prompt(50, 10)}, 6).tokens[0]);
  EXPECT_EQ(a_done.tokens, Serve(Chunked(), {Prompt(3, 8)}, 80).tokens[0]);
}

// The pass budget in rows: GLM-5's dimensions (models/configs/glm-5.json
// values) give ~0.38 MiB per row, so the default 512 MiB pass holds a
// 1K-token prompt whole.
TEST(PlannedPrefill, PassRowsFromActivationBytes) {
  ModelConfig c;
  c.hidden_size = 6144;
  c.index_topk = 2048;
  c.q_lora_rank = 2048;
  c.kv_lora_rank = 512;
  c.num_attention_heads = 64;
  c.qk_nope_head_dim = 192;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 256;
  c.index_n_heads = 32;
  c.index_head_dim = 128;
  c.n_routed_experts = 256;
  c.num_experts_per_tok = 8;
  c.moe_intermediate_size = 2048;
  c.intermediate_size = 12288;
  const int64_t per = PassActivationBytesPerRow(c);
  EXPECT_GT(per, 300 << 10);
  EXPECT_LT(per, 500 << 10);
  EXPECT_GE(PassRowsForBudget(c, int64_t{512} << 20), 1024);
  EXPECT_EQ(PassRowsForBudget(c, 1), 1);
}

}  // namespace
}  // namespace moe
