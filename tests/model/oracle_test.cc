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
  Numerics numerics = Numerics::kHfBf16;
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
         (i.param.kv == KvDtype::kF32 ? "" : "_kvbf16") + (i.param.numerics == Numerics::kF32 ? "_f32" : "");
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
  ec.numerics = p.numerics;
  auto eng = Engine::Open(OracleDir(p.model), ec);
  ASSERT_TRUE(eng.ok()) << eng.status();
  // Exact mode (explicit attention, HF BF16 numerics) must reproduce HF
  // token for token. Other modes (absorbed attention, f32 activations) use
  // different rounding points; they must be at least as close to the HF-BF16
  // goldens as HF itself is when run in f32 (recorded in sanity), and may
  // only diverge at near-ties.
  const bool exact = p.path == AttentionPath::kExplicit && p.numerics == Numerics::kHfBf16;
  const auto& sanity = g["sanity"];
  const double near_tie = sanity.value("near_tie_margin", 0.25);
  int hf32_greedy = 0;
  for (int a : sanity["f32_greedy_agree"].get<std::vector<int>>()) hf32_greedy += a;
  const auto hf32_tf = sanity["f32_teacher_forced_argmax_agree"].get<std::vector<int>>();
  int greedy_total = 0, greedy_equal = 0, tf_total = 0, tf_equal = 0;
  for (const auto& pr : g["prompts"]) {
    const auto prompt = Ids(pr["ids"]);
    const auto want = Ids(pr["greedy"]["tokens"]);
    const auto gmargin = pr["greedy"]["margin"].get<std::vector<double>>();
    KvCache cache = (*eng)->NewCache();
    auto r = (*eng)->Generate(prompt, static_cast<int64_t>(want.size()), SamplingParams{}, cache);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->tokens.size(), want.size());
    size_t first_diff = want.size();
    for (size_t i = 0; i < want.size(); ++i) {
      greedy_equal += r->tokens[i] == want[i];
      if (r->tokens[i] != want[i] && first_diff == want.size()) first_diff = i;
    }
    greedy_total += static_cast<int>(want.size());
    if (exact) {
      EXPECT_EQ(r->tokens, want) << pr["name"];
    } else if (first_diff < want.size() && hf32_greedy == static_cast<int>(g["prompts"].size()) * 32) {
      // Robust goldens (HF f32 agrees everywhere): only a near-tie may flip.
      EXPECT_LT(gmargin[first_diff], near_tie) << pr["name"] << " greedy diverges at " << first_diff << " (not a near-tie)";
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
        if (exact) {
          EXPECT_LE(margin[i], near_tie) << pr["name"] << " position " << i << " ours " << (*rows)[i].argmax << " hf "
                                     << am[i] << " (not a near-tie)";
        }
      }
    }
    tf_total += static_cast<int>(ids.size());
    tf_equal += static_cast<int>(ids.size()) - mismatch;
    if (exact) {
      // >= 31 of every 32 positions.
      EXPECT_LE(mismatch * 32, static_cast<int>(ids.size())) << pr["name"] << " teacher-forced mismatches " << mismatch;
      const auto nlp = pr["teacher_forced"]["next_logprob"].get<std::vector<double>>();
      double worst = 0;
      for (size_t i = 0; i + 1 < ids.size(); ++i) worst = std::max(worst, std::abs((*rows)[i].next_logprob - nlp[i]));
      EXPECT_LT(worst, 0.1) << pr["name"] << " next-token log-prob differs from HF";
    }
  }
  std::printf("%s: greedy %d/%d, teacher-forced %d/%d (HF f32: greedy %d, tf %d/%d)\n", p.model.c_str(), greedy_equal,
              greedy_total, tf_equal, tf_total, hf32_greedy, hf32_tf[0], hf32_tf[1]);
  if (!exact) {
    EXPECT_GE(greedy_equal, std::min(hf32_greedy, greedy_total * 9 / 10));
    EXPECT_GE(tf_equal, std::min(hf32_tf[0], tf_total * 31 / 32));
  }
}

// The MTP layer reproduces the oracle's MTP composition (vLLM convention):
// slot j takes the final-normed hidden state h_j and ids[j+1], predicts ids[j+2].
class MtpOracleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MtpOracleTest, DraftsMatchReference) {
  if (!testing::HaveOracle(GetParam())) GTEST_SKIP() << "no oracle goldens for " << GetParam();
  auto g = LoadGoldens(GetParam());
  auto eng = Engine::Open(OracleDir(GetParam()), EngineConfig{});
  ASSERT_TRUE(eng.ok()) << eng.status();
  ASSERT_TRUE((*eng)->model().has_mtp());
  const double near_tie = g["sanity"].value("near_tie_margin", 0.25);
  int total = 0, equal = 0, accepted = 0, acc_total = 0;
  for (const auto& pr : g["prompts"]) {
    const auto ids = Ids(pr["mtp_teacher_forced"]["ids"]);
    const auto want = Ids(pr["mtp_teacher_forced"]["draft_argmax"]);
    const auto margin = pr["mtp_teacher_forced"]["margin"].get<std::vector<double>>();
    auto drafts = (*eng)->TeacherForcedMtpDrafts(ids);
    ASSERT_TRUE(drafts.ok()) << drafts.status();
    const size_t n = ids.size() - 1;
    ASSERT_EQ(want.size(), n);
    int mism = 0;
    for (size_t j = 0; j < n; ++j) {
      const int32_t d = drafts->draft[j];
      ++total;
      if (d == want[j]) {
        ++equal;
      } else {
        ++mism;
        // The reference's standalone MTP layer runs HF's eager expert loop
        // (bf16 accumulation per expert) while the model runs grouped_mm (f32
        // sum of the K slots); the engine follows the latter everywhere, and
        // the MTP layer's own DSA selection (top-8) can flip on that noise.
        // Only the rate is bounded (below); mismatches are listed.
        std::printf("%s MTP slot %zu: ours %d ref %d (ref margin %.4f, near-tie %.2f)\n",
                    pr["name"].get<std::string>().c_str(), j, d, want[j], margin[j], near_tie);
      }
      // Acceptance of the draft against the main model's own greedy choice at j+1.
      if (j + 2 < ids.size()) {
        ++acc_total;
        accepted += d == drafts->main_argmax[j + 1];
      }
    }
    EXPECT_LE(mism * 32, static_cast<int>(n)) << pr["name"];
  }
  std::printf("%s MTP: drafts equal to reference %d/%d; draft == main-model argmax (acceptance) %d/%d\n",
              GetParam().c_str(), equal, total, accepted, acc_total);
}

INSTANTIATE_TEST_SUITE_P(Oracle, MtpOracleTest, ::testing::Values("glm-short", "glm-dsa", "deepseek-v3"),
                         [](const auto& i) {
                           std::string s = i.param;
                           for (char& ch : s) {
                             if (ch == '-') ch = '_';
                           }
                           return s;
                         });

std::vector<Case> Cases() {
  std::vector<Case> v;
  for (const char* m : {"glm-short", "glm-dsa", "deepseek-v3"}) {
    v.push_back({m, int64_t{1} << 40, AttentionPath::kExplicit});
    v.push_back({m, 0, AttentionPath::kExplicit});
    v.push_back({m, 4 * 3 * 64 * 32 * 2, AttentionPath::kExplicit});  // a few experts
    v.push_back({m, int64_t{1} << 40, AttentionPath::kAbsorbed});
    v.push_back({m, int64_t{1} << 40, AttentionPath::kExplicit, KvDtype::kBF16});
    v.push_back({m, int64_t{1} << 40, AttentionPath::kExplicit, KvDtype::kF32, Numerics::kF32});
    v.push_back({m, int64_t{1} << 40, AttentionPath::kAbsorbed, KvDtype::kF32, Numerics::kF32});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Oracle, OracleTest, ::testing::ValuesIn(Cases()), CaseName);

}  // namespace
}  // namespace moe
