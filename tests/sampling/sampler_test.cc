// The one sampler (common/sampling/sampler.h): greedy, filters, seeded draws,
// penalties, log-probabilities, and refusal of parameters out of range.
#include "common/sampling/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

namespace moe {
namespace {

TEST(Sampler, GreedyAndFiltersThatLeaveOneAreArgmax) {
  std::vector<float> l = {0.1f, 2.0f, 1.9f, -1.0f};
  Rng rng(1);
  std::unordered_map<int32_t, int32_t> none;
  SampleParams g;
  g.temperature = 0;
  EXPECT_EQ(Sample(l, g, none, -1, rng).token, 1);
  SampleParams k1;
  k1.top_k = 1;
  SampleParams p0;
  p0.top_p = 1e-6f;
  SampleParams m1;
  m1.min_p = 1.0f;
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(Sample(l, k1, none, -1, rng).token, 1);
    EXPECT_EQ(Sample(l, p0, none, -1, rng).token, 1);
    EXPECT_EQ(Sample(l, m1, none, -1, rng).token, 1);
  }
}

TEST(Sampler, SeededDrawsRepeatAndFollowTheDistribution) {
  std::vector<float> l = {0.0f, std::log(3.0f)};  // p = 0.25, 0.75
  std::unordered_map<int32_t, int32_t> none;
  SampleParams p;
  Rng a(42), b(42);
  int ones = 0;
  for (int i = 0; i < 4000; ++i) {
    int32_t x = Sample(l, p, none, -1, a).token;
    EXPECT_EQ(x, Sample(l, p, none, -1, b).token);
    ones += x;
  }
  EXPECT_NEAR(ones / 4000.0, 0.75, 0.03);
}

TEST(Sampler, PenaltiesAndLogprobs) {
  std::vector<float> l = {1.0f, 1.5f, 0.0f};
  Rng rng(3);
  SampleParams g;
  g.temperature = 0;
  g.frequency_penalty = 1.0f;
  std::unordered_map<int32_t, int32_t> counts{{1, 1}};
  auto r = Sample(l, g, counts, 2, rng);
  EXPECT_EQ(r.token, 0);  // 1.5 - 1 < 1.0
  double lse = std::log(std::exp(1.0) + std::exp(1.5) + std::exp(0.0));
  EXPECT_NEAR(r.logprob, 1.0 - lse, 1e-5);  // raw logits, not penalized
  ASSERT_EQ(r.top.size(), 2u);
  EXPECT_EQ(r.top[0].first, 1);
  EXPECT_EQ(r.top[1].first, 0);
  g.frequency_penalty = 0;
  g.presence_penalty = 1.0f;
  EXPECT_EQ(Sample(l, g, counts, -1, rng).token, 0);
}

TEST(Sampler, ParametersOutOfRangeAreRefusedByName) {
  EXPECT_TRUE(CheckSampleParams(SampleParams{}).ok());
  struct Case {
    SampleParams p;
    const char* name;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Case cases[] = {
      {{.temperature = -0.1f}, "temperature"},       {{.temperature = nan}, "temperature"},
      {{.top_p = 0.0f}, "top_p"},                    {{.top_p = 1.5f}, "top_p"},
      {{.top_k = -1}, "top_k"},                      {{.min_p = 1.5f}, "min_p"},
      {{.presence_penalty = nan}, "presence_penalty"}, {{.frequency_penalty = INFINITY}, "frequency_penalty"},
      {{.repetition_penalty = 0.0f}, "repetition_penalty"},
  };
  for (const Case& c : cases) {
    const absl::Status s = CheckSampleParams(c.p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_EQ(std::string(s.message()).rfind(c.name, 0), 0u) << s.message();
  }
}

TEST(Sampler, TheAllowedMaskIsNeverLeftWhateverTheParameters) {
  // Token 3 has by far the best logit; only 0 and 2 are legal.
  std::vector<float> l = {0.0f, 1.0f, 0.5f, 9.0f, -2.0f};
  std::vector<uint32_t> mask(MaskWords(5), 0);
  mask[0] = (1u << 0) | (1u << 2);
  SampleOptions opt;
  opt.allowed = mask;
  std::unordered_map<int32_t, int32_t> none;
  Rng rng(7);
  SampleParams g{.temperature = 0.0f};
  EXPECT_EQ(Sample(l, g, none, -1, rng, opt).token, 2);
  SampleParams t{.temperature = 1.5f, .top_p = 0.5f, .top_k = 1};  // top_k 1 over the legal ones
  for (int i = 0; i < 200; ++i) {
    const int32_t x = Sample(l, SampleParams{.temperature = 2.0f}, none, -1, rng, opt).token;
    EXPECT_TRUE(x == 0 || x == 2) << x;
    EXPECT_EQ(Sample(l, t, none, -1, rng, opt).token, 2);
  }
  // The reported logprob is the raw one (as without a mask).
  double z = 0;
  for (float v : l) z += std::exp(static_cast<double>(v));
  EXPECT_NEAR(Sample(l, g, none, -1, rng, opt).logprob, l[2] - std::log(z), 1e-5);
}

TEST(Sampler, BannedIdsGiveWayOnlyWhenNothingElseIsLegal) {
  std::vector<float> l = {0.0f, 5.0f, 1.0f};
  std::unordered_map<int32_t, int32_t> none;
  Rng rng(1);
  SampleParams g{.temperature = 0.0f};
  const std::vector<int32_t> banned = {1};
  SampleOptions opt;
  opt.banned = banned;
  EXPECT_EQ(Sample(l, g, none, -1, rng, opt).token, 2);  // min_tokens: the stop id waits
  std::vector<uint32_t> only1 = {1u << 1};
  opt.allowed = only1;
  EXPECT_EQ(Sample(l, g, none, -1, rng, opt).token, 1);  // the grammar says stop: it wins
}

TEST(Sampler, LogitBiasAndRepetitionPenalty) {
  std::vector<float> l = {2.0f, 1.0f, -1.0f};
  std::unordered_map<int32_t, int32_t> none;
  Rng rng(1);
  SampleParams g{.temperature = 0.0f};
  const std::vector<std::pair<int32_t, float>> bias = {{1, 1.5f}};
  SampleOptions opt;
  opt.logit_bias = bias;
  EXPECT_EQ(Sample(l, g, none, -1, rng, opt).token, 1);
  // Repetition penalty 3 on the seen token 0: 2.0 / 3 < 1.0.
  SampleParams r{.temperature = 0.0f, .repetition_penalty = 3.0f};
  const std::vector<int32_t> seen = {0, 0, 2};
  SampleOptions ro;
  ro.seen = seen;
  EXPECT_EQ(Sample(l, r, none, -1, rng, ro).token, 1);
  // A negative logit is multiplied: -0.5 * 3 = -1.5 < -1.0.
  std::vector<float> neg = {-0.5f, -1.0f, -9.0f};
  EXPECT_EQ(Sample(neg, r, none, -1, rng, ro).token, 1);
}

}  // namespace
}  // namespace moe
