#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <thread>

#include "services/inferd/batcher.h"
#include "services/inferd/prefix_cache.h"
#include "services/inferd/step_planner.h"
#include "tests/inferd/toy_model.h"

namespace moe::inferd {
namespace {

using testing::ToyModel;

// ---- planner -----------------------------------------------------------------

TEST(InferdPlanner, DecodeFirstThenChunkedPrefillWithinBudget) {
  std::vector<PlanInput> in = {{0}, {1000}, {0}, {10}};
  StepPlan p = PlanStep(in, 100, 64);
  ASSERT_EQ(p.entries.size(), 4u);
  EXPECT_EQ(p.entries[0].index, 0u);
  EXPECT_EQ(p.entries[1].index, 2u);
  EXPECT_EQ(p.entries[2].index, 1u);
  EXPECT_EQ(p.entries[2].tokens, 64);  // chunk
  EXPECT_FALSE(p.entries[2].samples);
  EXPECT_EQ(p.entries[3].tokens, 10);  // rest of the budget: 100 - 2 - 64 = 34 >= 10
  EXPECT_TRUE(p.entries[3].samples);
  EXPECT_EQ(p.total_tokens, 76);
  // Budget exhausted by decodes: prompts still advance one token.
  StepPlan q = PlanStep({{0}, {0}, {5}}, 2, 64);
  EXPECT_EQ(q.total_tokens, 3);
}

// ---- prefix cache ------------------------------------------------------------

std::shared_ptr<const SeqState> State(const std::vector<int32_t>& t) {
  auto s = std::make_shared<testing::ToyState>();
  s->tokens = t;
  return s;
}

TEST(InferdPrefixCache, LongestPrefixNeverTheWholePromptAndBytesBound) {
  PrefixCache c(1000);
  c.Insert({1, 2, 3, 4}, State({1, 2, 3, 4}));
  c.Insert({1, 2, 9}, State({1, 2, 9}));
  EXPECT_EQ(c.Lookup({1, 2, 3, 4, 5}).tokens, 4);
  EXPECT_EQ(c.Lookup({1, 2, 3, 4}).tokens, 3);  // one prompt token is left to feed
  EXPECT_EQ(c.Lookup({1, 2, 9, 9}).tokens, 3);
  EXPECT_EQ(c.Lookup({7}).tokens, 0);
  c.Insert({1, 2, 3, 4, 5, 6}, State({1, 2, 3, 4, 5, 6}));  // supersedes {1,2,3,4}
  EXPECT_EQ(c.size(), 2u);
  PrefixCache small(150);  // each toy state is 64 + 4 n bytes
  small.Insert({1, 2, 3}, State({1, 2, 3}));
  small.Insert({5, 6, 7}, State({5, 6, 7}));
  EXPECT_EQ(small.size(), 1u);
  EXPECT_LE(small.bytes(), 150);
  EXPECT_EQ(small.Lookup({5, 6, 7, 8}).tokens, 3);
}

// ---- batcher -----------------------------------------------------------------

struct Collect {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> tokens;
  std::vector<std::chrono::steady_clock::time_point> at;
  bool done = false;
  SeqOutput fin;
  SeqCallback Cb() {
    return [this](SeqOutput o) {
      std::lock_guard<std::mutex> l(mu);
      for (auto& t : o.tokens) {
        tokens.push_back(t.token);
        at.push_back(std::chrono::steady_clock::now());
      }
      if (o.finished) {
        done = true;
        fin = o;
      }
      cv.notify_all();
    };
  }
  void Wait() {
    std::unique_lock<std::mutex> l(mu);
    ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(20), [&] { return done; }));
  }
  size_t Count() {
    std::lock_guard<std::mutex> l(mu);
    return tokens.size();
  }
  std::string Text() {
    std::string s;
    for (int32_t t : tokens) {
      if (t < 256) s += static_cast<char>(t);
    }
    return s;
  }
};

std::vector<int32_t> Bytes(const std::string& s) { return std::vector<int32_t>(s.begin(), s.end()); }

SeqRequest Req(const std::string& id, std::vector<int32_t> prompt, int max_tokens, float temperature = 0) {
  SeqRequest r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = temperature;
  r.stop_token_ids = {ToyModel::kEos};
  return r;
}

TEST(InferdBatcher, GreedySequenceFollowsTheScriptAndStopsAtEos) {
  ToyModel m;
  Batcher b(&m, {});
  Collect c;
  ASSERT_TRUE(b.Submit(Req("a", Bytes("<|user|>\nhi\n<|assistant|>\n"), 100), c.Cb()).ok());
  c.Wait();
  EXPECT_EQ(c.Text(), "The quick brown fox jumps over the lazy dog.");
  EXPECT_EQ(c.tokens.back(), ToyModel::kEos);
  EXPECT_EQ(c.fin.reason, EndReason::kStop);
  EXPECT_EQ(c.fin.completion_tokens, 45);
  Collect d;
  ASSERT_TRUE(b.Submit(Req("b", Bytes("x"), 5), d.Cb()).ok());
  d.Wait();
  EXPECT_EQ(d.fin.reason, EndReason::kLength);
  EXPECT_EQ(d.tokens.size(), 5u);
}

TEST(InferdBatcher, ContinuousBatchingSharesStepsAndIsBatchInvariant) {
  testing::ToyConfig tc;
  tc.step_us = 1000;
  ToyModel m(tc);
  // Alone first (seeded sampling), then the same request among 7 others.
  std::string alone_text;
  {
    Batcher b(&m, {});
    Collect c;
    auto r = Req("solo", Bytes("<|assistant|>\n"), 30, 1.0f);
    r.has_seed = true;
    r.seed = 7;
    ASSERT_TRUE(b.Submit(r, c.Cb()).ok());
    c.Wait();
    alone_text = c.Text();
  }
  Batcher b(&m, {});
  std::vector<std::unique_ptr<Collect>> cs;
  for (int i = 0; i < 8; ++i) {
    cs.push_back(std::make_unique<Collect>());
    auto r = Req("s" + std::to_string(i), Bytes(i == 3 ? "<|assistant|>\n" : "p" + std::to_string(i)), 30, 1.0f);
    r.has_seed = true;
    r.seed = i == 3 ? 7 : 100 + i;
    ASSERT_TRUE(b.Submit(r, cs.back()->Cb()).ok());
  }
  int64_t total = 0;
  for (auto& c : cs) {
    c->Wait();
    total += static_cast<int64_t>(c->tokens.size());
  }
  EXPECT_EQ(cs[3]->Text(), alone_text);  // same seed, same tokens, whatever the batch
  auto st = b.stats();
  EXPECT_LT(st.steps, total / 2) << "sequences did not share steps";
  EXPECT_GE(st.max_batch_rows, 4);
}

TEST(InferdBatcher, LongPrefillIsChunkedAndDoesNotStallDecoding) {
  testing::ToyConfig tc;
  tc.step_us = 500;
  tc.row_us = 20;  // prefill tokens cost
  ToyModel m(tc);
  BatcherConfig bc;
  bc.prefill_chunk = 64;
  bc.max_step_tokens = 80;
  Batcher b(&m, bc);
  Collect a, longp;
  ASSERT_TRUE(b.Submit(Req("a", Bytes("<|assistant|>\n"), 400, 1.0f), a.Cb()).ok());
  while (a.Count() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(b.Submit(Req("long", std::vector<int32_t>(2000, 'x'), 5), longp.Cb()).ok());
  longp.Wait();
  auto first_long = longp.at.front();
  size_t a_during = 0;
  {
    std::lock_guard<std::mutex> l(a.mu);
    for (auto t : a.at) a_during += t < first_long ? 1 : 0;
  }
  // 2000 prompt tokens / 64 per step = 32 steps of prefill, each also a decode step of "a".
  EXPECT_GE(a_during, 30u) << "decoding stalled during another sequence's prefill";
  b.Cancel("a");
  a.Wait();
}

TEST(InferdBatcher, PrefixReuseSkipsPrefillAndKeepsTheOutput) {
  ToyModel m;
  std::string sys = "<|system|>\n" + std::string(300, 's') + "\n";
  auto p1 = Bytes(sys + "<|user|>\nfirst\n<|assistant|>\n");
  auto p2 = Bytes(sys + "<|user|>\nsecond question\n<|assistant|>\n");
  std::string with_cache, without_cache;
  int cached = 0;
  {
    Batcher b(&m, {});
    Collect c1, c2;
    ASSERT_TRUE(b.Submit(Req("1", p1, 60, 1.0f), c1.Cb()).ok());
    c1.Wait();
    auto r = Req("2", p2, 60, 1.0f);
    r.has_seed = true;
    r.seed = 5;
    ASSERT_TRUE(b.Submit(r, c2.Cb()).ok());
    c2.Wait();
    with_cache = c2.Text();
    cached = c2.fin.cached_prompt_tokens;
    EXPECT_GE(b.stats().prefix_hit_tokens, static_cast<int64_t>(sys.size()));
  }
  {
    BatcherConfig bc;
    bc.prefix_cache_bytes = 0;
    Batcher b(&m, bc);
    Collect c1, c2;
    ASSERT_TRUE(b.Submit(Req("1", p1, 60, 1.0f), c1.Cb()).ok());
    c1.Wait();
    auto r = Req("2", p2, 60, 1.0f);
    r.has_seed = true;
    r.seed = 5;
    ASSERT_TRUE(b.Submit(r, c2.Cb()).ok());
    c2.Wait();
    without_cache = c2.Text();
    EXPECT_EQ(c2.fin.cached_prompt_tokens, 0);
  }
  EXPECT_GE(cached, static_cast<int>(sys.size()));
  EXPECT_EQ(with_cache, without_cache);
}

TEST(InferdBatcher, CancelStopsBeforeTheNextStep) {
  testing::ToyConfig tc;
  tc.step_us = 3000;
  ToyModel m(tc);
  Batcher b(&m, {});
  Collect c;
  ASSERT_TRUE(b.Submit(Req("x", Bytes("a"), 1000, 1.0f), c.Cb()).ok());
  while (c.Count() < 5) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  int64_t steps_at_cancel = b.stats().steps;
  size_t tokens_at_cancel = c.Count();
  EXPECT_TRUE(b.Cancel("x"));
  c.Wait();
  EXPECT_EQ(c.fin.reason, EndReason::kCancelled);
  EXPECT_LE(c.tokens.size(), tokens_at_cancel);  // the step in flight delivers nothing more
  EXPECT_LE(b.stats().steps, steps_at_cancel + 1);  // at most the step already running
  EXPECT_EQ(b.stats().max_steps_after_cancel, 0);
  EXPECT_EQ(b.stats().cancelled, 1);
  EXPECT_FALSE(b.Cancel("x"));
}

// A serving plan's KV budget: a request that can never fit is a bad request,
// one that does not fit next to the live sequences is refused as full (by
// name), and a finished sequence gives its room back.
TEST(InferdBatcher, KvBudgetAdmitsWhatFitsAndRefusesTheRestByName) {
  testing::ToyConfig tc;
  tc.kv_budget_bytes = 100 * 4;  // 100 tokens
  tc.step_us = 2000;
  ToyModel m(tc);
  Batcher b(&m, {});
  Collect c;
  auto too_big = b.Submit(Req("big", std::vector<int32_t>(20, 'a'), 90), c.Cb());
  EXPECT_EQ(too_big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(too_big.message()).find("holds 400 B in all"), std::string::npos) << too_big.message();
  Collect a;
  ASSERT_TRUE(b.Submit(Req("a", Bytes("<|user|>\nhi\n<|assistant|>\n"), 60), a.Cb()).ok());  // 26 + 60 tokens
  Collect d;
  auto full = b.Submit(Req("d", Bytes("xyz"), 20), d.Cb());
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(std::string(full.message()).find("KV budget full: 344 of 400 B"), std::string::npos) << full.message();
  a.Wait();
  EXPECT_EQ(a.fin.reason, EndReason::kStop);
  ASSERT_TRUE(b.Submit(Req("d", Bytes("xyz"), 20), d.Cb()).ok());  // room again
  d.Wait();
  EXPECT_EQ(d.fin.reason, EndReason::kLength);
}

TEST(InferdBatcher, BadRequestsAndFullAreRefused) {
  testing::ToyConfig tc;
  tc.max_context = 64;
  tc.step_us = 2000;
  ToyModel m(tc);
  BatcherConfig bc;
  bc.max_sequences = 1;
  Batcher b(&m, bc);
  Collect c;
  EXPECT_EQ(b.Submit(Req("e", {}, 4), c.Cb()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.Submit(Req("v", {999}, 4), c.Cb()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.Submit(Req("l", std::vector<int32_t>(60, 1), 10), c.Cb()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.Submit(Req("z", {1}, 0), c.Cb()).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(b.Submit(Req("ok", {1}, 40, 1.0f), c.Cb()).ok());
  Collect c2;
  EXPECT_EQ(b.Submit(Req("ok", {1}, 4), c2.Cb()).code(), absl::StatusCode::kResourceExhausted);
  b.Shutdown();
  c.Wait();
  EXPECT_EQ(c.fin.reason, EndReason::kCancelled);
  EXPECT_EQ(b.Submit(Req("late", {1}, 4), c2.Cb()).code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace moe::inferd
