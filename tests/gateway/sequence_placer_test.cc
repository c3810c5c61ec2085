#include "services/gateway/sequence_placer.h"

#include <gtest/gtest.h>

#include <condition_variable>

#include "tests/gateway/fake_worker.h"

namespace moe::gateway {
namespace {

using testing::FakeWorker;

struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<SeqEvent> events;
  bool done = false;
  SeqSink Sink() {
    return [this](SeqEvent e) {
      std::lock_guard<std::mutex> l(mu);
      if (e.kind != SeqEvent::kToken) done = true;
      events.push_back(std::move(e));
      cv.notify_all();
    };
  }
  void Wait() {
    std::unique_lock<std::mutex> l(mu);
    ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(10), [&] { return done; }));
  }
};

GenerateParams Params(std::vector<int32_t> prompt, int max_tokens = 4) {
  GenerateParams p;
  p.request_id = "r";
  p.prompt = std::move(prompt);
  p.max_tokens = max_tokens;
  p.sampling.temperature = 0;
  return p;
}

std::vector<int32_t> Prompt(int len, int salt) {
  std::vector<int32_t> p(len);
  for (int i = 0; i < len; ++i) p[i] = (i * 7 + salt) % 250;
  return p;
}

TEST(GatewayPlacer, LeastLoadedSpreadsSequences) {
  auto w0 = std::make_shared<FakeWorker>("w0", "abcdefgh", 20);
  auto w1 = std::make_shared<FakeWorker>("w1", "abcdefgh", 20);
  SequencePlacer s({w0, w1}, {});
  Collector c0, c1;
  auto h0 = s.Start(Params(Prompt(10, 1)), c0.Sink());
  auto h1 = s.Start(Params(Prompt(10, 2)), c1.Sink());
  EXPECT_EQ(w0->started.load(), 1);
  EXPECT_EQ(w1->started.load(), 1);
  c0.Wait();
  c1.Wait();
}

TEST(GatewayPlacer, PrefixAffinityPrefersTheWorkerThatSawThePrefix) {
  auto w0 = std::make_shared<FakeWorker>("w0", "ab", 1);
  auto w1 = std::make_shared<FakeWorker>("w1", "ab", 1);
  SequencePlacerConfig cfg;
  cfg.block_tokens = 16;
  SequencePlacer s({w0, w1}, cfg);
  auto shared = Prompt(64, 3);
  int first;
  {
    // Load w0 by one so the first request goes to w1... then idle again.
    first = s.Pick(shared);
    Collector c;
    auto h = s.Start(Params(shared), c.Sink());
    c.Wait();
  }
  // A prompt extending the same prefix goes to the same worker, whatever its index.
  auto longer = shared;
  longer.push_back(1);
  EXPECT_EQ(s.Pick(longer), first);
  // An unrelated prompt is not attracted.
  auto other = Prompt(64, 9);
  EXPECT_EQ(s.Pick(other), 0);  // tie on load: lowest index
  EXPECT_EQ(SequencePlacer::BlockHashes(shared, 16).size(), 4u);
  EXPECT_EQ(SequencePlacer::BlockHashes(longer, 16), SequencePlacer::BlockHashes(shared, 16));
}

TEST(GatewayPlacer, AffinityYieldsToLoad) {
  auto w0 = std::make_shared<FakeWorker>("w0", std::string(50, 'x'), 20);
  auto w1 = std::make_shared<FakeWorker>("w1", "ab", 1);
  SequencePlacerConfig cfg;
  cfg.block_tokens = 16;
  cfg.affinity_slack = 1;
  SequencePlacer s({w0, w1}, cfg);
  auto shared = Prompt(32, 4);
  std::vector<std::unique_ptr<SeqHandle>> hs;
  std::vector<std::unique_ptr<Collector>> cs;
  for (int i = 0; i < 4; ++i) {  // all on... whichever has the prefix while load allows
    cs.push_back(std::make_unique<Collector>());
    hs.push_back(s.Start(Params(shared, 40), cs.back()->Sink()));
  }
  // With slack 1 the prefix holder may lead by at most 1: both got work.
  EXPECT_GE(w0->started.load(), 1);
  EXPECT_GE(w1->started.load(), 1);
  for (auto& h : hs) h->Cancel();
  hs.clear();
}

TEST(GatewayPlacer, DeadWorkerLeavesRotationAndRequestIsRetried) {
  auto w0 = std::make_shared<FakeWorker>("w0", "hey", 1);
  auto w1 = std::make_shared<FakeWorker>("w1", "hey", 1);
  w0->fail_before_first_token = true;
  SequencePlacer s({w0, w1}, {});
  Collector c;
  auto h = s.Start(Params(Prompt(8, 1)), c.Sink());  // goes to w0 first (tie), fails, retried on w1
  c.Wait();
  ASSERT_FALSE(c.events.empty());
  EXPECT_EQ(c.events.back().kind, SeqEvent::kFinish);
  EXPECT_EQ(w0->started.load(), 1);
  EXPECT_EQ(w1->started.load(), 1);
  auto snap = s.Snapshot();
  EXPECT_FALSE(snap[0].alive);
  EXPECT_TRUE(snap[1].alive);
  EXPECT_EQ(s.alive_count(), 1);
  EXPECT_EQ(s.Pick(Prompt(8, 1)), 1);
  // A probe brings it back once healthy.
  w0->fail_before_first_token = false;
  s.ProbeAll();
  EXPECT_EQ(s.alive_count(), 2);
  w1->healthy = false;
  s.ProbeAll();
  EXPECT_EQ(s.alive_count(), 1);
}

TEST(GatewayPlacer, NoRetryAfterATokenWasStreamed) {
  auto w0 = std::make_shared<FakeWorker>("w0", "hello", 1);
  auto w1 = std::make_shared<FakeWorker>("w1", "hello", 1);
  w0->fail_after_first_token = true;
  SequencePlacer s({w0, w1}, {});
  Collector c;
  auto h = s.Start(Params(Prompt(8, 1)), c.Sink());
  c.Wait();
  EXPECT_EQ(c.events.back().kind, SeqEvent::kError);
  EXPECT_EQ(c.events.back().status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(std::string(c.events.back().status.message()).find("w0"), std::string::npos);
  EXPECT_EQ(w1->started.load(), 0);
}

TEST(GatewayPlacer, AllDeadIsUnavailableAtOnce) {
  auto w0 = std::make_shared<FakeWorker>("w0", "x", 1);
  w0->fail_before_first_token = true;
  SequencePlacer s({w0}, {});
  Collector c;
  auto h = s.Start(Params(Prompt(4, 1)), c.Sink());
  c.Wait();
  EXPECT_EQ(c.events.back().kind, SeqEvent::kError);
  Collector c2;
  auto h2 = s.Start(Params(Prompt(4, 1)), c2.Sink());
  c2.Wait();
  EXPECT_EQ(c2.events.back().status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(w0->started.load(), 1);  // the dead worker was not asked again
}

TEST(GatewayPlacer, CancelReachesTheWorker) {
  auto w0 = std::make_shared<FakeWorker>("w0", std::string(1000, 'z'), 2);
  SequencePlacer s({w0}, {});
  Collector c;
  auto h = s.Start(Params(Prompt(4, 1), 1000), c.Sink());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  h->Cancel();
  c.Wait();
  EXPECT_EQ(c.events.back().finish, FinishReason::kCancelled);
  EXPECT_EQ(w0->cancels.load(), 1);
  EXPECT_EQ(s.Snapshot()[0].active, 0);
}

}  // namespace
}  // namespace moe::gateway
