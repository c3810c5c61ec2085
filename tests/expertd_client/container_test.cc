// expertd over a real moestream container (moe convert of a tiny GLM-5
// checkpoint fixture), driven through RemoteExpertSource, the engine's
// ExpertSource: the bytes and the model's logits must equal an in-process
// source's, for a budget so small that every layer evicts, with prefetch
// hints on and off (docs/ARCHITECTURE.md invariant 1).
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "common/format/container.h"
#include "common/format/convert.h"
#include "common/model/engine.h"
#include "common/model/weights.h"
#include "services/expertd_client/client.h"
#include "services/expertd_client/remote_expert_source.h"

extern char** environ;

namespace moe {
namespace {

namespace fs = std::filesystem;
const std::string kBin = MOE_BINARY_DIR "/services/expertd/expertd";
const std::string kFixture = MOE_SOURCE_DIR "/tests/data/format/fixtures/glm_bf16";

// Reads each record from the container on every Get (no cache).
class LocalContainerSource final : public ExpertSource {
 public:
  explicit LocalContainerSource(const Container* c) : c_(c) {}
  absl::StatusOr<ExpertLease> Get(int layer, int expert) override {
    const ExpertRecordInfo* r = c_->FindExpert(layer, expert);
    if (!r) return absl::NotFoundError("no record");
    auto buf = std::make_shared<AlignedBuffer>();
    auto bytes = c_->ReadRecord(*r, buf.get());
    if (!bytes.ok()) return bytes.status();
    auto v = Container::ViewRecord(*r, bytes->data());
    auto* w = new ExpertWeights();
    ExpertMatrix* m[3] = {&w->gate, &w->up, &w->down};
    for (int p = 0; p < 3; ++p) *m[p] = ExpertMatrix{v[p].format, v[p].rows, v[p].cols, v[p].data, v[p].scales};
    return ExpertLease(w, [w, buf] { delete w; });
  }
  ExpertSourceStats Stats() const override { return {}; }

 private:
  const Container* c_;
};

// Forwards Get, drops hints (prefetch off).
class NoHints final : public ExpertSource {
 public:
  explicit NoHints(ExpertSource* s) : s_(s) {}
  absl::StatusOr<ExpertLease> Get(int l, int e) override { return s_->Get(l, e); }
  void Hint(std::span<const ExpertKey>) override {}
  ExpertSourceStats Stats() const override { return s_->Stats(); }

 private:
  ExpertSource* s_;
};

// Records the order of Hint / HintAhead / Get calls, forwarding Gets.
class Recorder final : public ExpertSource {
 public:
  explicit Recorder(ExpertSource* s) : s_(s) {}
  absl::StatusOr<ExpertLease> Get(int l, int e) override {
    log.push_back({'G', l, e});
    return s_->Get(l, e);
  }
  void Hint(std::span<const ExpertKey> k) override {
    for (auto x : k) log.push_back({'H', x.layer, x.expert});
  }
  void HintAhead(std::span<const ExpertKey> k) override {
    for (auto x : k) log.push_back({'A', x.layer, x.expert});
  }
  ExpertSourceStats Stats() const override { return {}; }
  struct Call {
    char kind;
    int layer, expert;
  };
  std::vector<Call> log;

 private:
  ExpertSource* s_;
};

class ExpertdContainer : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("moe_expertd_container_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ConvertOptions o;
    o.in_dir = kFixture;
    o.out_dir = (dir_ / "container").string();
    auto r = ConvertCheckpoint(o);
    ASSERT_TRUE(r.ok()) << r.status();
    auto c = Container::Open(o.out_dir);
    ASSERT_TRUE(c.ok()) << c.status();
    container_ = std::move(*c);
    ASSERT_FALSE(container_->records().empty());
  }
  void TearDown() override {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int st;
      ::waitpid(pid_, &st, 0);
    }
    fs::remove_all(dir_);
  }
  void StartExpertd(uint64_t budget_records, int top_k) {
    sock_ = (dir_ / "e.sock").string();
    uint64_t rec = 0;
    for (const auto& r : container_->records()) rec = std::max(rec, r.length);
    std::vector<std::string> args = {kBin, "--model", (dir_ / "container").string(), "--socket", sock_, "--budget",
                                     std::to_string(budget_records * rec), "--top-k", std::to_string(top_k),
                                     "--log-level", "warning"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ASSERT_EQ(posix_spawn(&pid_, argv[0], nullptr, nullptr, argv.data(), environ), 0);
    for (int i = 0; i < 200 && !fs::exists(sock_); ++i) usleep(20000);
    ASSERT_TRUE(fs::exists(sock_));
  }
  fs::path dir_;
  std::string sock_;
  pid_t pid_ = -1;
  std::unique_ptr<Container> container_;
};

TEST_F(ExpertdContainer, RemoteSourceReturnsTheContainersExactBytesUnderEviction) {
  StartExpertd(4, 2);  // top-2 per size class: nearly every Get evicts
  auto src = expertd::RemoteExpertSource::Connect(sock_, container_.get());
  ASSERT_TRUE(src.ok()) << src.status();
  AlignedBuffer buf;
  for (int round = 0; round < 2; ++round) {
    for (const auto& r : container_->records()) {
      auto lease = (*src)->Get(r.layer, r.expert);
      ASSERT_TRUE(lease.ok()) << lease.status();
      auto bytes = container_->ReadRecord(r, &buf);
      ASSERT_TRUE(bytes.ok());
      auto v = Container::ViewRecord(r, bytes->data());
      const ExpertMatrix* m[3] = {&(*lease)->gate, &(*lease)->up, &(*lease)->down};
      for (int p = 0; p < 3; ++p) {
        ASSERT_EQ(m[p]->format, v[p].format);
        ASSERT_EQ(m[p]->rows, v[p].rows);
        EXPECT_EQ(std::memcmp(m[p]->data, v[p].data, DataBytes(v[p].format, v[p].rows, v[p].cols)), 0);
        if (v[p].scales) {
          EXPECT_EQ(std::memcmp(m[p]->scales, v[p].scales, ScaleBytes(v[p].format, v[p].rows, v[p].cols)), 0);
        }
      }
    }
  }
  auto s = (*src)->Stats();
  EXPECT_EQ(s.gets, int64_t(2 * container_->records().size()));
  EXPECT_GT(s.misses, int64_t(container_->records().size()));  // evictions forced re-reads
  EXPECT_FALSE((*src)->Get(0, 9999).ok());
}

TEST_F(ExpertdContainer, LogitsThroughExpertdEqualInProcessForTinyBudgetWithAndWithoutPrefetch) {
  auto eng = Engine::Open(kFixture, EngineConfig{});
  if (!eng.ok()) GTEST_SKIP() << "engine cannot open the fixture: " << eng.status();
  const ModelConfig cfg = (*eng)->config();
  StartExpertd(2 * 3, 2);  // top-2 per layer x 3 size classes at most
  auto ck = OpenCheckpoint(kFixture);
  ASSERT_TRUE(ck.ok());
  const std::vector<int32_t> ids = {5, 17, 3, 88, 42, 42, 7, 61};
  LocalContainerSource local(container_.get());
  auto run = [&](ExpertSource* s) -> absl::StatusOr<std::vector<float>> {
    auto w = LoadResidentWeights(**ck, cfg);
    if (!w.ok()) return w.status();
    Model m(cfg, std::move(*w), s, ModelOptions{});
    KvCache cache = KvCache::ForModel(cfg, KvDtype::kF32);
    auto r = m.Forward(ids, cache, true);
    if (!r.ok()) return r.status();
    return r->logits;
  };
  auto want = run(&local);
  if (!want.ok()) GTEST_SKIP() << "model cannot run container experts yet: " << want.status();
  auto remote = expertd::RemoteExpertSource::Connect(sock_, container_.get());
  ASSERT_TRUE(remote.ok()) << remote.status();
  auto with_prefetch = run(remote->get());
  ASSERT_TRUE(with_prefetch.ok()) << with_prefetch.status();
  EXPECT_EQ(*with_prefetch, *want);
  NoHints no_hints(remote->get());
  auto without = run(&no_hints);
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(*without, *want);
}

// A prompt's forward marked as prefill (BatchSeq::prefill) reaches expertd as
// FetchRequest.prefill (its no-pollution admission) and changes no logit.
TEST_F(ExpertdContainer, PrefillRowsReachExpertdAsPrefillFetches) {
  auto eng = Engine::Open(kFixture, EngineConfig{});
  if (!eng.ok()) GTEST_SKIP() << "engine cannot open the fixture: " << eng.status();
  const ModelConfig cfg = (*eng)->config();
  StartExpertd(2 * 3, 2);
  auto ck = OpenCheckpoint(kFixture);
  ASSERT_TRUE(ck.ok());
  const std::vector<int32_t> ids = {5, 17, 3, 88, 42, 42, 7, 61};
  auto remote = expertd::RemoteExpertSource::Connect(sock_, container_.get());
  ASSERT_TRUE(remote.ok()) << remote.status();
  auto admin = expertd::ExpertdClient::ConnectAdmin(sock_);
  ASSERT_TRUE(admin.ok()) << admin.status();
  auto run = [&](bool prefill) -> absl::StatusOr<std::vector<float>> {
    auto w = LoadResidentWeights(**ck, cfg);
    if (!w.ok()) return w.status();
    Model m(cfg, std::move(*w), remote->get(), ModelOptions{});
    KvCache cache = KvCache::ForModel(cfg, KvDtype::kF32);
    BatchSeq one{ids, &cache, true, true};
    one.prefill = prefill;
    auto r = m.ForwardBatch(std::span<const BatchSeq>(&one, 1));
    if (!r.ok()) return r.status();
    return (*r)[0].logits;
  };
  auto decode = run(false);
  ASSERT_TRUE(decode.ok()) << decode.status();
  auto st0 = (*admin)->Stats();
  ASSERT_TRUE(st0.ok()) << st0.status();
  EXPECT_EQ(st0->prefill_requests(), 0u);
  auto prefill = run(true);
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  EXPECT_EQ(*prefill, *decode);
  auto st1 = (*admin)->Stats();
  ASSERT_TRUE(st1.ok()) << st1.status();
  EXPECT_GT(st1->prefill_requests(), 0u);
}

TEST_F(ExpertdContainer, RouterLookAheadHintsTheNextMoeLayerBeforeItsGets) {
  auto ck = OpenCheckpoint(kFixture);
  ASSERT_TRUE(ck.ok());
  auto cfg = LoadModelConfig(kFixture);
  ASSERT_TRUE(cfg.ok());
  auto w = LoadResidentWeights(**ck, *cfg);
  ASSERT_TRUE(w.ok()) << w.status();
  LocalContainerSource local(container_.get());
  Recorder rec(&local);
  Model m(*cfg, std::move(*w), &rec, ModelOptions{});
  KvCache cache = KvCache::ForModel(*cfg, KvDtype::kF32);
  // Decode-sized batches (<= 8 rows) get look-ahead hints; a long prefill does not.
  const std::vector<int32_t> prompt = {5, 17, 3, 88, 42, 42, 7, 61, 9, 10};
  ASSERT_TRUE(m.Forward(prompt, cache, false).ok());
  for (const auto& c : rec.log) EXPECT_NE(c.kind, 'A');
  rec.log.clear();
  const int32_t one[1] = {12};
  ASSERT_TRUE(m.Forward(one, cache, false).ok());
  // Layer 0 is dense, layer 1 MoE: A(1, *) before H(1, *) and G(1, *).
  size_t first_a = rec.log.size(), first_g = rec.log.size(), n_a = 0;
  for (size_t i = 0; i < rec.log.size(); ++i) {
    const auto& c = rec.log[i];
    if (c.kind == 'A') {
      EXPECT_EQ(c.layer, 1);
      EXPECT_GE(c.expert, 0);
      EXPECT_LT(c.expert, cfg->n_routed_experts);
      first_a = std::min(first_a, i);
      ++n_a;
    }
    if (c.kind == 'G' && c.layer == 1) first_g = std::min(first_g, i);
  }
  EXPECT_EQ(n_a, size_t(cfg->num_experts_per_tok));
  ASSERT_LT(first_g, rec.log.size());
  EXPECT_LT(first_a, first_g);
}

}  // namespace
}  // namespace moe
