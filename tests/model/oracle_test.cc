// Token-exactness against Hugging Face transformers on the tiny oracle models
// (tests/data/oracle/*/goldens.json, written by tools/oracle/gen_oracle.py).
#include <gtest/gtest.h>

#include <cmath>

#include "tests/model/oracle_util.h"

namespace moe {
namespace {

using testing::Ids;
using testing::LoadGoldens;
using testing::OracleDir;

struct Case {
  std::string model;
  int64_t budget;  // expert cache bytes; 0 = evict on every layer
  AttentionPath path;
  KvDtype kv = KvDtype::kF32;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.model << " budget " << c.budget << (c.path == AttentionPath::kExplicit ? " explicit" : " absorbed")
      << (c.kv == KvDtype::kF32 ? " kv-f32" : " kv-bf16");
}

std::string CaseName(const ::testing::TestParamInfo<Case>& i) {
  std::string m = i.param.model;
  for (char& ch : m) {
    if (ch == '-') ch = '_';
  }
  return m + (i.param.budget == 0 ? "_evict_all" : i.param.budget < (1 << 20) ? "_small_budget" : "_unbounded") +
         (i.param.path == AttentionPath::kExplicit ? "_explicit" : "_absorbed") +
         (i.param.kv == KvDtype::kF32 ? "" : "_kvbf16");
}

class OracleTest : public ::testing::TestWithParam<Case> {};

TEST_P(OracleTest, GreedyAndTeacherForced) {
  const Case& p = GetParam();
  if (!testing::HaveOracle(p.model)) GTEST_SKIP() << "no oracle goldens for " << p.model;
  auto g = LoadGoldens(p.model);
  EngineConfig ec;
  ec.expert_budget_bytes = p.budget;
  ec.attention = p.path;
  ec.kv_dtype = p.kv;
  auto eng = Engine::Open(OracleDir(p.model), ec);
  ASSERT_TRUE(eng.ok()) << eng.status();
  const int64_t V = (*eng)->config().vocab_size;
  const bool exact = p.path == AttentionPath::kExplicit;
  int greedy_total = 0, greedy_equal = 0;
  for (const auto& pr : g["prompts"]) {
    const auto prompt = Ids(pr["ids"]);
    const auto want = Ids(pr["greedy"]["tokens"]);
    KvCache cache = (*eng)->NewCache();
    SamplingParams sp;
    auto r = (*eng)->Generate(prompt, static_cast<int64_t>(want.size()), sp, cache);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->tokens.size(), want.size());
    int eq = 0;
    for (size_t i = 0; i < want.size(); ++i) eq += r->tokens[i] == want[i];
    greedy_total += static_cast<int>(want.size());
    greedy_equal += eq;
    if (exact) {
      EXPECT_EQ(r->tokens, want) << pr["name"];
    }

    // Teacher-forced: all positions in one batch.
    const auto ids = Ids(pr["teacher_forced"]["ids"]);
    const auto am = Ids(pr["teacher_forced"]["argmax"]);
    const auto margin = pr["teacher_forced"]["margin"].get<std::vector<double>>();
    auto rows = (*eng)->Score(ids);
    ASSERT_TRUE(rows.ok()) << rows.status();
    int mismatch = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      if ((*rows)[i].argmax != am[i]) {
        ++mismatch;
        // Only a near-tie in the reference may differ.
        EXPECT_LT(margin[i], 0.26) << pr["name"] << " position " << i << " ours " << (*rows)[i].argmax << " hf "
                                   << am[i];
      }
    }
    // >= 31 of every 32 positions.
    EXPECT_LE(mismatch * 32, static_cast<int>(ids.size())) << pr["name"] << " teacher-forced mismatches " << mismatch;
    // Log-probabilities of the next token close to HF's.
    const auto nlp = pr["teacher_forced"]["next_logprob"].get<std::vector<double>>();
    double worst = 0;
    for (size_t i = 0; i + 1 < ids.size(); ++i) worst = std::max(worst, std::abs((*rows)[i].next_logprob - nlp[i]));
    EXPECT_LT(worst, exact ? 0.15 : 0.5) << pr["name"];
    (void)V;
  }
  // The absorbed path is not HF's arithmetic; it must still agree on nearly all tokens.
  EXPECT_GE(greedy_equal * 100, greedy_total * (exact ? 100 : 90)) << greedy_equal << "/" << greedy_total;
}

std::vector<Case> Cases() {
  std::vector<Case> v;
  for (const char* m : {"glm-short", "glm-dsa", "deepseek-v3"}) {
    v.push_back({m, int64_t{1} << 40, AttentionPath::kExplicit});
    v.push_back({m, 0, AttentionPath::kExplicit});
    v.push_back({m, 4 * 3 * 64 * 32 * 2, AttentionPath::kExplicit});  // a few experts
    v.push_back({m, int64_t{1} << 40, AttentionPath::kAbsorbed});
    v.push_back({m, int64_t{1} << 40, AttentionPath::kExplicit, KvDtype::kBF16});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Oracle, OracleTest, ::testing::ValuesIn(Cases()), CaseName);

}  // namespace
}  // namespace moe
