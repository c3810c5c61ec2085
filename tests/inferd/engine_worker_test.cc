// The production worker for real: the `inferd` binary over the engine with a
// tiny random checkpoint (tests/model/tiny_checkpoint.h), driven over gRPC by
// the gateway's worker client. Checks that served greedy tokens equal
// Engine::Generate's, that batching several sequences and prefix reuse keep
// every sequence's tokens, and that the batcher over EngineModel cancels.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <filesystem>
#include <thread>

#include "services/gateway/grpc_worker.h"
#include "services/inferd/batcher.h"
#include "services/inferd/engine_model.h"
#include "services/inferd/prefix_disk_tier.h"
#include "tests/inferd/seq_collector.h"
#include "tests/model/tiny_checkpoint.h"

namespace moe {
namespace {

using inferd::testing::Greedy;

// One directory per test: ctest runs the tests as parallel processes, which
// must not write the same files at once.
std::string TinyDir() {
  static const std::string dir = [] {
    std::string d = inferd::testing::PerTestDir("tiny_engine_model");
    testing::WriteTinyCheckpoint(d, testing::TinySpec{});
    return d;
  }();
  return dir;
}

// Greedy decoding of one sequence alone, step by step through the engine's
// forward pass (no EOS stop): the reference every served sequence must match.
std::vector<int32_t> ReferenceGreedy(const std::vector<int32_t>& prompt, int n) {
  auto e = Engine::Open(TinyDir(), EngineConfig{});
  EXPECT_TRUE(e.ok()) << e.status();
  KvCache cache = (*e)->NewCache();
  std::vector<int32_t> out;
  auto r = (*e)->model().Forward(prompt, cache, false);
  const int64_t V = (*e)->config().vocab_size;
  while (r.ok() && static_cast<int>(out.size()) < n) {
    int32_t t = Argmax(r->logits.data() + (r->rows - 1) * V, V);
    out.push_back(t);
    std::vector<int32_t> one{t};
    r = (*e)->model().Forward(one, cache, false);
  }
  EXPECT_TRUE(r.ok()) << r.status();
  return out;
}

// Sequences of the demo model can take a while under a loaded test run.
struct Collect : inferd::testing::SeqCollector {
  Collect() : SeqCollector(std::chrono::seconds(60)) {}
};

TEST(InferdEngine, BatchedAndPrefixReusedSequencesMatchTheEngine) {
  auto m = inferd::EngineModel::Open(TinyDir(), EngineConfig{}, 0);
  ASSERT_TRUE(m.ok()) << m.status();
  const std::vector<int32_t> p1 = {5, 9, 14, 3, 27, 40, 2, 8};
  std::vector<int32_t> p2 = p1;
  p2.insert(p2.end(), {11, 12, 13});
  const std::vector<int32_t> p3 = {60, 61, 62};
  auto r1 = ReferenceGreedy(p1, 12), r2 = ReferenceGreedy(p2, 12), r3 = ReferenceGreedy(p3, 12);
  inferd::BatcherConfig bc;
  bc.prefill_chunk = 3;  // several chunks per prompt, interleaved with decodes
  inferd::Batcher b(m->get(), bc);
  Collect c1, c3;
  ASSERT_TRUE(b.Submit(Greedy("1", p1, 12), c1.Cb()).ok());
  ASSERT_TRUE(b.Submit(Greedy("3", p3, 12), c3.Cb()).ok());
  c1.Wait();
  c3.Wait();
  EXPECT_EQ(c1.tokens, r1);
  EXPECT_EQ(c3.tokens, r3);
  Collect c2;  // shares p1's prefix: reuses its KV
  ASSERT_TRUE(b.Submit(Greedy("2", p2, 12), c2.Cb()).ok());
  c2.Wait();
  EXPECT_EQ(c2.tokens, r2);
  EXPECT_GE(c2.fin.cached_prompt_tokens, static_cast<int32_t>(p1.size()));
}

// The disk tier across a restart, on the real engine: a worker's finished
// sequence is spilled (KvCache's format under the engine's state identity);
// a new EngineModel + Batcher on the same directory - another process' worker
// - resumes from it: greedy tokens identical to the engine's, the prompt's
// prefix counted as cached. Another KV dtype is another identity: no reuse.
TEST(InferdEngine, DiskPrefixTierSurvivesARestartWithIdenticalGreedyTokens) {
  const std::string dir = std::string(MOE_BINARY_DIR) + "/tests/inferd/prefix_disk_engine";
  std::filesystem::remove_all(dir);
  const std::vector<int32_t> p1 = {5, 9, 14, 3, 27, 40, 2, 8, 17, 33};
  std::vector<int32_t> p2 = p1;  // the next turn of the conversation
  p2.insert(p2.end(), {11, 12, 13});
  const auto r1 = ReferenceGreedy(p1, 8);
  auto serve = [&](const EngineConfig& cfg, const std::vector<int32_t>& prompt, inferd::BatcherStats* st) {
    auto m = inferd::EngineModel::Open(TinyDir(), cfg, 0);
    EXPECT_TRUE(m.ok()) << m.status();
    auto id = (*m)->StateIdentity();
    EXPECT_TRUE(id.ok()) << id.status();
    auto tier = inferd::PrefixDiskTier::Open(dir, int64_t{64} << 20, *id);
    EXPECT_TRUE(tier.ok()) << tier.status();
    inferd::BatcherConfig bc;
    bc.prefill_chunk = 4;
    bc.prefix_disk = std::move(*tier);
    inferd::Batcher b(m->get(), bc);
    Collect c;
    EXPECT_TRUE(b.Submit(Greedy("s", prompt, 8), c.Cb()).ok());
    c.Wait();
    *st = b.stats();
    return std::make_pair(c.tokens, c.fin.cached_prompt_tokens);
  };
  inferd::BatcherStats st;
  auto cold = serve(EngineConfig{}, p1, &st);
  EXPECT_EQ(cold.first, r1);
  EXPECT_EQ(cold.second, 0);
  // Restarted: the same prompt reuses all but its last token, the next turn
  // the whole first conversation (prompt + 7 of its 8 answer tokens were fed).
  auto warm = serve(EngineConfig{}, p1, &st);
  EXPECT_EQ(warm.first, r1);
  EXPECT_EQ(warm.second, static_cast<int32_t>(p1.size()) - 1);
  EXPECT_EQ(st.prefix.disk_hits, 1);
  std::vector<int32_t> turn2 = p1;
  turn2.insert(turn2.end(), r1.begin(), r1.end() - 1);
  turn2.insert(turn2.end(), p2.begin() + static_cast<long>(p1.size()), p2.end());
  auto next = serve(EngineConfig{}, turn2, &st);
  EXPECT_EQ(next.first, ReferenceGreedy(turn2, 8));
  EXPECT_EQ(next.second, static_cast<int32_t>(p1.size() + r1.size() - 1));
  EXPECT_EQ(st.prefix.disk.ignored, 0);
  EngineConfig bf16;
  bf16.kv_dtype = KvDtype::kBF16;
  auto other = serve(bf16, p1, &st);
  EXPECT_EQ(other.second, 0);
  EXPECT_EQ(st.prefix.disk_hits, 0);
  std::filesystem::remove_all(dir);
}

// A model whose first step waits until Release(): sequences submitted
// before that are all active from the second step on, however the
// submitting thread is scheduled (a 2-core CI box once ran the batched test
// below with only 2 sequences at once).
class HeldModel : public inferd::SequenceModel {
 public:
  explicit HeldModel(inferd::SequenceModel* m) : m_(m) {}
  void Release() {
    std::lock_guard<std::mutex> l(mu_);
    held_ = false;
    cv_.notify_all();
  }
  std::string name() const override { return m_->name(); }
  int32_t vocab_size() const override { return m_->vocab_size(); }
  int64_t max_context() const override { return m_->max_context(); }
  std::unique_ptr<inferd::SeqState> NewState() override { return m_->NewState(); }
  absl::StatusOr<std::unique_ptr<inferd::SeqState>> Clone(const inferd::SeqState& st, int64_t n) override {
    return m_->Clone(st, n);
  }
  absl::Status Forward(std::span<Item> items) override {
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return !held_; });
    }
    return m_->Forward(items);
  }
  double expert_hit_rate() const override { return m_->expert_hit_rate(); }
  int64_t expert_fetches() const override { return m_->expert_fetches(); }

 private:
  inferd::SequenceModel* m_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = true;
};

// Continuous batching for real: the batched run gives every sequence the
// same tokens as running it alone, and shares routed-expert fetches (one per
// distinct (layer, expert) per step), so it fetches fewer than the same
// sequences one after another.
TEST(InferdEngine, BatchedStepsShareExpertFetches) {
  const std::vector<std::vector<int32_t>> prompts = {
      {5, 9, 14, 3, 27, 40, 2, 8}, {60, 61, 62}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}, {33}};
  auto run = [&](bool together, int64_t chunk, inferd::BatcherStats* st, bool fused = true) {
    auto m = inferd::EngineModel::Open(TinyDir(), EngineConfig{}, 0);
    EXPECT_TRUE(m.ok()) << m.status();
    (*m)->set_batched_forward(fused);
    HeldModel held(m->get());
    if (!together) held.Release();
    inferd::BatcherConfig bc;
    bc.prefill_chunk = chunk;
    bc.prefix_cache_bytes = 0;  // no prefix reuse: compare the same work
    inferd::Batcher b(&held, bc);
    std::vector<std::unique_ptr<Collect>> cs;
    for (size_t i = 0; i < prompts.size(); ++i) {
      cs.push_back(std::make_unique<Collect>());
      EXPECT_TRUE(b.Submit(Greedy(std::to_string(i), prompts[i], 10), cs.back()->Cb()).ok());
      if (!together) cs.back()->Wait();
    }
    held.Release();
    std::vector<std::vector<int32_t>> out;
    for (auto& c : cs) {
      c->Wait();
      out.push_back(c->tokens);
    }
    *st = b.stats();
    return out;
  };
  inferd::BatcherStats alone, batched;
  auto a = run(false, 128, &alone);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(a[i], ReferenceGreedy(prompts[i], 10)) << i;
  auto b = run(true, 4, &batched);
  EXPECT_EQ(b, a);
  EXPECT_GE(batched.max_batch_rows, 3);
  EXPECT_GT(alone.expert_fetches, 0);
  EXPECT_LT(batched.expert_fetches, alone.expert_fetches);
  EXPECT_LT(batched.steps, alone.steps);
  // The unfused baseline (one forward per sequence per step): same tokens,
  // more expert fetches.
  inferd::BatcherStats unfused;
  EXPECT_EQ(run(true, 4, &unfused, /*fused=*/false), a);
  EXPECT_GT(unfused.expert_fetches, batched.expert_fetches);
}

TEST(InferdEngine, ServedOverGrpcByTheInferdBinary) {
  const std::string sock = std::string(MOE_BINARY_DIR) + "/tests/inferd/engine_worker_test.sock";
  const std::string bin = std::string(MOE_BINARY_DIR) + "/services/inferd/inferd";
  ::unlink(sock.c_str());
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::string model = "--model=" + TinyDir(), listen = "--listen=unix:" + sock;
    execl(bin.c_str(), "inferd", model.c_str(), listen.c_str(), "--log-level=warning", nullptr);
    _exit(127);
  }
  gateway::GrpcWorker w("w0", "unix:" + sock);
  bool up = false;
  for (int i = 0; i < 300 && !up; ++i) {
    up = w.Health().ok();
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(up) << "inferd did not come up";
  auto info = w.Health();
  EXPECT_EQ(info->max_context, 256);
  const std::vector<int32_t> prompt = {5, 9, 14, 3, 27};
  auto ref = ReferenceGreedy(prompt, 10);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> got;
  bool done = false;
  gateway::SeqEvent fin;
  gateway::GenerateParams p;
  p.request_id = "g1";
  p.prompt = prompt;
  p.max_tokens = 10;
  p.sampling.temperature = 0;
  p.logprobs = 2;
  auto h = w.Generate(p, [&](gateway::SeqEvent e) {
    std::lock_guard<std::mutex> l(mu);
    if (e.kind == gateway::SeqEvent::kToken) {
      got.push_back(e.token);
      EXPECT_EQ(e.top.size(), 2u);
      EXPECT_LE(e.logprob, 0.0f);
    } else {
      done = true;
      fin = e;
    }
    cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> l(mu);
    ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(60), [&] { return done; }));
  }
  h.reset();
  EXPECT_EQ(fin.kind, gateway::SeqEvent::kFinish) << fin.status;
  EXPECT_EQ(got, ref);
  EXPECT_EQ(fin.completion_tokens, 10);
  EXPECT_EQ(fin.prompt_tokens, 5);
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace moe
