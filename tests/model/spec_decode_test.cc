// Speculative decoding in the engine (Engine::Generate with SpecOptions):
// greedy and seeded outputs are token for token those without speculation on
// every committed model (HF oracle models, the trained demo model and its
// int4 container, the random GLM), for every mode and depth and across
// expert cache budgets; the KV cache at the end is byte for byte the one
// that never drafted; a rejected draft's rollback leaves the main cache and
// the MTP layer's own cache (indexer keys included) byte-identical to ones
// that never held it.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/model/spec_mtp.h"
#include "tests/model/oracle_util.h"

namespace moe {
namespace {

using testing::Ids;

std::string ModelPath(const std::string& m) {
  return m.rfind("oracle/", 0) == 0 ? testing::OracleDir(m.substr(7)) : std::string(MOE_SOURCE_DIR) + "/models/" + m;
}

// The cache's bytes as Save writes them (in memory: ctest runs the models' cases as parallel
// processes, which must not share a file).
std::string Bytes(const KvCache& c) { return c.Serialize(); }

// Prompts: the goldens' where the model has them, and a repetitive one (prompt lookup hits).
std::vector<std::vector<int32_t>> Prompts(const std::string& m, int64_t vocab) {
  std::vector<std::vector<int32_t>> out;
  // The int4 container answers the demo model's prompts.
  const std::string base = m == "glm-tiny-chat-q4" ? "glm-tiny-chat" : m;
  const std::string g = m.rfind("oracle/", 0) == 0 ? testing::OracleDir(m.substr(7)) + "/goldens.json"
                                                   : std::string(MOE_SOURCE_DIR) + "/tests/data/model/" + base +
                                                         "/goldens.json";
  if (std::ifstream(g).good()) {
    std::ifstream in(g);
    const auto j = nlohmann::json::parse(in);
    for (const auto& p : j["prompts"]) {
      if (out.size() < 2) out.push_back(Ids(p["ids"]));
    }
  }
  std::vector<int32_t> rep;
  for (int r = 0; r < 3; ++r) {
    for (int32_t t = 5; t < 17; ++t) rep.push_back(static_cast<int32_t>((t * 7 + r / 2) % vocab));
  }
  out.push_back(rep);
  return out;
}

class SpecDecodeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SpecDecodeTest, GreedyTokensAndFinalCacheIdenticalForEveryModeAndDepth) {
  const std::string m = GetParam();
  if (m.rfind("oracle/", 0) == 0 && !testing::HaveOracle(m.substr(7))) GTEST_SKIP() << "no " << m;
  auto eng = Engine::Open(ModelPath(m), EngineConfig{});
  ASSERT_TRUE(eng.ok()) << eng.status();
  const Engine& e = **eng;
  int64_t accepted = 0, rejected = 0, mtp_accepted = 0;
  int pi = 0;
  for (const auto& prompt : Prompts(m, e.config().vocab_size)) {
    KvCache ref_cache = e.NewCache();
    auto ref = e.Generate(prompt, 20, SamplingParams{}, ref_cache);
    ASSERT_TRUE(ref.ok()) << ref.status();
    const std::string ref_bytes = Bytes(ref_cache);
    for (SpecMode mode : {SpecMode::kNgram, SpecMode::kMtp, SpecMode::kAuto}) {
      for (int k : {1, 2, 4}) {
        KvCache cache = e.NewCache();
        auto r = e.Generate(prompt, 20, SamplingParams{}, cache, SpecOptions{mode, k});
        ASSERT_TRUE(r.ok()) << r.status();
        const std::string what = absl::StrCat(m, " prompt ", pi, " ", std::string(SpecModeName(mode)), " K=", k);
        EXPECT_EQ(r->tokens, ref->tokens) << what;
        EXPECT_EQ(r->stopped_at_eos, ref->stopped_at_eos) << what;
        EXPECT_EQ(cache.pending_token(), ref_cache.pending_token()) << what;
        EXPECT_TRUE(Bytes(cache) == ref_bytes) << what << ": the KV cache differs from the plain run's";
        EXPECT_EQ(r->spec.tokens + 1, static_cast<int64_t>(r->tokens.size())) << what;
        EXPECT_LE(r->spec.accepted, r->spec.drafted);
        accepted += r->spec.accepted;
        rejected += r->spec.drafted - r->spec.accepted;
        if (mode == SpecMode::kMtp) mtp_accepted += r->spec.accepted;
      }
    }
    ++pi;
  }
  // The runs rolled back rejected drafts (else the invariance above proves little); on the trained
  // model (and its container) drafts were accepted too (random weights rarely repeat themselves).
  EXPECT_GT(rejected, 0) << m;
  if (m.rfind("glm-tiny-chat", 0) == 0) {
    EXPECT_GT(accepted, 0) << m;
    EXPECT_GT(mtp_accepted, 0) << m;
  }
  std::printf("%s: accepted %lld, rejected %lld, of them mtp accepted %lld\n", m.c_str(),
              static_cast<long long>(accepted), static_cast<long long>(rejected), static_cast<long long>(mtp_accepted));
}

INSTANTIATE_TEST_SUITE_P(Models, SpecDecodeTest,
                         ::testing::Values("glm-tiny-chat", "glm-tiny-chat-q4", "tiny-glm-random", "oracle/glm-dsa",
                                           "oracle/glm-short", "oracle/deepseek-v3"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string s = i.param;
                           for (char& c : s) {
                             if (c == '-' || c == '/') c = '_';
                           }
                           return s;
                         });

const std::string kDemo = std::string(MOE_SOURCE_DIR) + "/models/glm-tiny-chat";

// A rejected draft, rolled back, leaves the main cache exactly as if it had
// never been fed: Save() of both is byte-identical.
TEST(SpecRollback, RejectedDraftLeavesTheCacheAsNeverDrafted) {
  // The int4 container keeps its DSA index keys at int8 (IndexKeys auto): those are rolled back too.
  for (const std::string m : {"glm-tiny-chat", "glm-tiny-chat-q4", "oracle/glm-dsa"}) {
    const std::string dir = ModelPath(m);
    if (!std::ifstream(dir + "/config.json").good()) continue;
    auto eng = Engine::Open(dir, EngineConfig{});
    ASSERT_TRUE(eng.ok()) << eng.status();
    const Model& model = (*eng)->model();
    const int64_t V = model.config().vocab_size;
    const std::vector<int32_t> prompt = Prompts(m, V)[0];
    KvCache plain = (*eng)->NewCache(), drafted = (*eng)->NewCache();
    auto f = model.Forward(prompt, plain, false);
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_TRUE(model.Forward(prompt, drafted, false).ok());
    const int32_t t = Argmax(f->logits.data(), V);
    // Three drafts, the first already wrong.
    const int32_t wrong = (t + 1) % static_cast<int32_t>(V);
    const std::vector<int32_t> verify = {t, wrong, 3, 4};
    auto v = model.Forward(verify, drafted, /*all_rows=*/true);
    ASSERT_TRUE(v.ok()) << v.status();
    ASSERT_EQ(v->rows, 4);
    drafted.Truncate(plain.length() + 1);
    const int32_t one[1] = {t};
    auto p = model.Forward(one, plain, false);
    ASSERT_TRUE(p.ok());
    // The verify's row 0 is the plain step's logits, bit for bit.
    EXPECT_EQ(0, std::memcmp(p->logits.data(), v->logits.data(), V * sizeof(float)));
    EXPECT_TRUE(Bytes(plain) == Bytes(drafted)) << m;
    if (m == "glm-tiny-chat-q4") EXPECT_TRUE(plain.index_q8());
    // And the next step continues identically.
    const int32_t nxt[1] = {Argmax(p->logits.data(), V)};
    auto a = model.Forward(nxt, plain, false), b = model.Forward(nxt, drafted, false);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(0, std::memcmp(a->logits.data(), b->logits.data(), V * sizeof(float)));
  }
}

// The MTP layer's own cache (latents, rope keys, indexer keys) after a round
// of recursive drafts equals one that only ever held the committed slots.
TEST(SpecRollback, MtpCacheAfterRecursiveDraftsEqualsOneThatNeverDrafted) {
  auto eng = Engine::Open(kDemo, EngineConfig{});
  ASSERT_TRUE(eng.ok()) << eng.status();
  const Model& model = (*eng)->model();
  ASSERT_TRUE(model.has_mtp());
  const int64_t V = model.config().vocab_size;
  const std::vector<int32_t> prompt = Prompts("glm-tiny-chat", V)[0];
  KvCache cache = (*eng)->NewCache();
  const BatchSeq one{prompt, &cache, false, true, /*all_hidden=*/true};
  auto f = model.ForwardBatch(std::span<const BatchSeq>(&one, 1));
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ((*f)[0].hidden.size(), prompt.size() * model.config().hidden_size);
  const int32_t next = Argmax((*f)[0].logits.data(), V);
  MtpDrafter deep(model, KvDtype::kF32, (*eng)->index_q8()), shallow(model, KvDtype::kF32, (*eng)->index_q8());
  deep.AddHidden(0, (*f)[0].hidden);
  shallow.AddHidden(0, (*f)[0].hidden);
  auto d4 = deep.Draft(prompt, next, 4);
  auto d1 = shallow.Draft(prompt, next, 1);
  ASSERT_TRUE(d4.ok() && d1.ok()) << d4.status() << d1.status();
  ASSERT_EQ(d4->size(), 4u);
  ASSERT_EQ(d1->size(), 1u);
  EXPECT_EQ((*d4)[0], (*d1)[0]);
  EXPECT_EQ(deep.cache().length(), static_cast<int64_t>(prompt.size()));
  EXPECT_TRUE(Bytes(deep.cache()) == Bytes(shallow.cache()));
  // The same drafts as teacher-forced MTP over the prompt + next (slot j = (h_j, t_{j+1})).
  std::vector<int32_t> ids = prompt;
  ids.push_back(next);
  auto tf = (*eng)->TeacherForcedMtpDrafts(ids);
  ASSERT_TRUE(tf.ok());
  EXPECT_EQ(tf->draft.back(), (*d4)[0]);
  // A prefix copy cut inside the MTP cache (inferd's prefix cache) re-extends from the kept hidden
  // states: the same drafts and MTP cache as a drafter that only ever saw the prefix.
  const size_t n = prompt.size() - 3;
  const int64_t H = model.config().hidden_size;
  MtpDrafter cut = deep, fresh(model, KvDtype::kF32, (*eng)->index_q8());
  cut.Truncate(static_cast<int64_t>(n));
  fresh.AddHidden(0, std::span<const float>((*f)[0].hidden).first(n * H));
  const std::span<const int32_t> pre = std::span<const int32_t>(prompt).first(n);
  auto dc = cut.Draft(pre, prompt[n], 3), df = fresh.Draft(pre, prompt[n], 3);
  ASSERT_TRUE(dc.ok() && df.ok());
  EXPECT_EQ(dc->size(), 3u);
  EXPECT_EQ(*dc, *df);
  EXPECT_TRUE(Bytes(cut.cache()) == Bytes(fresh.cache()));
  // A missing hidden row (a gap) makes the drafter stale: no drafts, never wrong ones.
  MtpDrafter gap(model, KvDtype::kF32, (*eng)->index_q8());
  gap.AddHidden(3, (*f)[0].hidden);
  EXPECT_TRUE(gap.stale());
  EXPECT_TRUE(gap.Draft(prompt, next, 2)->empty());
}

// Seeded sampling: keyed draws make the tokens the same with and without speculation.
TEST(SpecSampling, SeededTokensIdenticalAcrossModes) {
  auto eng = Engine::Open(kDemo, EngineConfig{});
  ASSERT_TRUE(eng.ok()) << eng.status();
  SamplingParams sp;
  sp.sample.temperature = 0.9f;
  sp.sample.top_p = 0.95f;
  sp.sample.repetition_penalty = 1.1f;  // needs the seen-token bookkeeping of every accepted draft
  sp.sample.frequency_penalty = 0.2f;
  const std::vector<int32_t> prompt = Prompts("glm-tiny-chat", (*eng)->config().vocab_size)[0];
  for (uint64_t seed : {1ull, 11ull, 12345ull}) {
    sp.seed = seed;
    KvCache c0 = (*eng)->NewCache();
    auto ref = (*eng)->Generate(prompt, 24, sp, c0);
    ASSERT_TRUE(ref.ok()) << ref.status();
    for (SpecMode mode : {SpecMode::kNgram, SpecMode::kMtp, SpecMode::kAuto}) {
      KvCache c = (*eng)->NewCache();
      auto r = (*eng)->Generate(prompt, 24, sp, c, SpecOptions{mode, 3});
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->tokens, ref->tokens) << "seed " << seed << " " << SpecModeName(mode);
    }
  }
}

// Expert cache budgets (0 evicts on every layer) change nothing, with speculation too.
TEST(SpecBudgets, SameTokensAtEveryBudget) {
  std::vector<int32_t> ref;
  for (int64_t budget : {int64_t{1} << 40, int64_t{200000}, int64_t{0}}) {
    EngineConfig ec;
    ec.expert_budget_bytes = budget;
    auto eng = Engine::Open(kDemo, ec);
    ASSERT_TRUE(eng.ok()) << eng.status();
    const std::vector<int32_t> prompt = Prompts("glm-tiny-chat", (*eng)->config().vocab_size)[1];
    for (SpecMode mode : {SpecMode::kOff, SpecMode::kMtp, SpecMode::kAuto}) {
      KvCache c = (*eng)->NewCache();
      auto r = (*eng)->Generate(prompt, 16, SamplingParams{}, c, SpecOptions{mode, 3});
      ASSERT_TRUE(r.ok()) << r.status();
      if (ref.empty()) ref = r->tokens;
      EXPECT_EQ(r->tokens, ref) << "budget " << budget << " " << SpecModeName(mode);
    }
  }
}

TEST(SpecErrors, MtpWithoutTheLayerAndBadDepthRefusedByName) {
  EngineConfig ec;
  ec.load_mtp = false;
  auto eng = Engine::Open(kDemo, ec);
  ASSERT_TRUE(eng.ok()) << eng.status();
  const std::vector<int32_t> prompt = {1, 2, 3};
  KvCache c = (*eng)->NewCache();
  auto r = (*eng)->Generate(prompt, 4, SamplingParams{}, c, SpecOptions{SpecMode::kMtp, 2});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("MTP"), std::string::npos) << r.status();
  KvCache c2 = (*eng)->NewCache();
  auto bad = (*eng)->Generate(prompt, 4, SamplingParams{}, c2, SpecOptions{SpecMode::kNgram, 0});
  EXPECT_NE(bad.status().message().find("--draft-tokens"), std::string::npos) << bad.status();
  KvCache c3 = (*eng)->NewCache();
  EXPECT_TRUE((*eng)->Generate(prompt, 4, SamplingParams{}, c3, SpecOptions{SpecMode::kAuto, 2}).ok());
}

}  // namespace
}  // namespace moe
