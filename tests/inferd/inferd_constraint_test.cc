// Structured outputs inside continuous batching: constrained and free sequences share steps;
// each constrained one follows its own grammar, the free ones are untouched, and a
// constrained sequence gives the same tokens alone or batched.
#include <gtest/gtest.h>

#include "common/structured/grammar_constraint.h"
#include "common/text/output_vocab.h"
#include "nlohmann/json.hpp"
#include "services/inferd/batcher.h"
#include "tests/inferd/seq_collector.h"
#include "tests/inferd/toy_model.h"

namespace moe::inferd {
namespace {

using testing::ToyModel;

using Done = testing::SeqCollector;

std::vector<int32_t> Bytes(const std::string& s) { return std::vector<int32_t>(s.begin(), s.end()); }

class InferdConstraint : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = structured::ConstraintCompiler::Create(text::ByteLevelTexts(), {ToyModel::kEos}, 257);
    ASSERT_TRUE(c.ok()) << c.status();
    compiler_ = std::move(*c);
  }
  SeqRequest Req(const std::string& id, const std::string& prompt, const structured::ConstraintSpec* spec,
                 float temperature, uint64_t seed) {
    SeqRequest r;
    r.id = id;
    r.prompt = Bytes(prompt);
    r.max_tokens = 300;
    r.sampling.temperature = temperature;
    r.has_seed = true;
    r.seed = seed;
    r.stop_token_ids = {ToyModel::kEos};
    if (spec) {
      auto c = compiler_->NewConstraint(*spec, r.stop_token_ids);
      EXPECT_TRUE(c.ok()) << c.status();
      if (c.ok()) r.constraint = std::move(*c);
    }
    return r;
  }
  std::unique_ptr<structured::ConstraintCompiler> compiler_;
};

structured::ConstraintSpec Schema(const char* s) {
  structured::ConstraintSpec spec;
  spec.kind = structured::ConstraintSpec::Kind::kJsonSchema;
  spec.source = s;
  spec.max_whitespace = 3;
  return spec;
}

TEST_F(InferdConstraint, MixedBatchEachSequenceFollowsItsOwnGrammar) {
  testing::ToyConfig tc;
  tc.step_us = 200;
  ToyModel m(tc);
  const auto person = Schema(R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},
      "age":{"type":"integer","minimum":0,"maximum":120}},"required":["name","age"],"additionalProperties":false})");
  const auto answer = Schema(R"({"type":"object","properties":{"answer":{"enum":["yes","no"]}},"required":["answer"]})");
  structured::ConstraintSpec regex;
  regex.kind = structured::ConstraintSpec::Kind::kRegex;
  regex.source = "[0-9]{3}-[a-z]{2}";

  // Alone first: the constrained sequence's tokens (seeded sampling).
  std::vector<int32_t> alone;
  {
    Batcher b(&m, {});
    Done d;
    ASSERT_TRUE(b.Submit(Req("solo", "<|assistant|>\n", &person, 1.0f, 5), d.Cb()).ok());
    d.Wait();
    alone = d.tokens;
  }
  Batcher b(&m, {});
  std::vector<std::unique_ptr<Done>> ds;
  for (int i = 0; i < 9; ++i) {
    ds.push_back(std::make_unique<Done>());
    const structured::ConstraintSpec* spec = i % 3 == 0 ? nullptr : i % 3 == 1 ? &person : &answer;
    if (i == 8) spec = &regex;
    const bool solo_twin = i == 4;  // the alone run's request, in the middle of the batch
    ASSERT_TRUE(b.Submit(Req("s" + std::to_string(i), solo_twin ? "<|assistant|>\n" : "<|assistant|>\n#" + std::to_string(i),
                             solo_twin ? &person : spec, 1.0f, solo_twin ? 5 : 100 + i),
                         ds.back()->Cb())
                    .ok());
  }
  for (int i = 0; i < 9; ++i) {
    Done& d = *ds[i];
    d.Wait();
    const std::string out = d.Text();
    if (i == 4) {
      EXPECT_EQ(d.tokens, alone) << "a constrained sequence changed with the batch";
      continue;
    }
    if (i == 8) {
      EXPECT_EQ(d.fin.reason, EndReason::kStop);
      ASSERT_EQ(out.size(), 6u) << out;
      EXPECT_TRUE(std::isdigit(out[0]) && std::isdigit(out[2]) && out[3] == '-' && std::islower(out[5])) << out;
      continue;
    }
    if (i % 3 == 0) {
      // Free: the toy's script (temperature 1 adds letter noise, but it stops at EOS).
      EXPECT_EQ(d.fin.reason, EndReason::kStop) << out;
      continue;
    }
    ASSERT_EQ(d.fin.reason, EndReason::kStop) << out;
    EXPECT_EQ(d.tokens.back(), ToyModel::kEos);
    auto j = nlohmann::json::parse(out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << i << ": " << out;
    if (i % 3 == 1) {
      EXPECT_TRUE(j["name"].is_string()) << out;
      EXPECT_TRUE(j["age"].is_number_integer() && j["age"].get<int>() >= 0 && j["age"].get<int>() <= 120) << out;
      EXPECT_EQ(j.size(), 2u) << out;
    } else {
      EXPECT_TRUE(j["answer"] == "yes" || j["answer"] == "no") << out;
    }
    EXPECT_EQ(out.find("    "), std::string::npos) << "whitespace run above 3: " << out;
  }
}

TEST_F(InferdConstraint, GreedyConstrainedOutputEndsValidOrByLength) {
  ToyModel m;
  Batcher b(&m, {});
  const auto any = Schema(R"({"type":"object","properties":{"s":{"type":"string"}},"required":["s"]})");
  // Greedy on the toy: the grammar is the only thing between it and its script.
  Done d;
  auto r = Req("g", "<|assistant|>\n", &any, 0.0f, 1);
  r.max_tokens = 12;
  ASSERT_TRUE(b.Submit(std::move(r), d.Cb()).ok());
  d.Wait();
  // Either complete JSON and a stop, or cut by the length limit.
  if (d.fin.reason == EndReason::kStop) {
    EXPECT_FALSE(nlohmann::json::parse(d.Text(), nullptr, false).is_discarded()) << d.Text();
  } else {
    EXPECT_EQ(d.fin.reason, EndReason::kLength);
    EXPECT_EQ(d.tokens.size(), 12u);
  }
}

TEST_F(InferdConstraint, MinTokensKeepsStopIdsOutAndLogitBiasActs) {
  ToyModel m;
  Batcher b(&m, {});
  Done d;
  auto r = Req("m", "<|assistant|>\n", nullptr, 0.0f, 1);
  r.min_tokens = 60;  // the script is 44 bytes: EOS must wait
  r.max_tokens = 70;
  ASSERT_TRUE(b.Submit(std::move(r), d.Cb()).ok());
  d.Wait();
  EXPECT_GE(d.tokens.size(), 60u);
  for (size_t i = 0; i + 1 < d.tokens.size(); ++i) EXPECT_NE(d.tokens[i], ToyModel::kEos) << i;
  Done e;
  auto q = Req("b", "<|assistant|>\n", nullptr, 0.0f, 1);
  q.max_tokens = 3;
  q.logit_bias = {{'Z', 100.0f}};
  ASSERT_TRUE(b.Submit(std::move(q), e.Cb()).ok());
  e.Wait();
  EXPECT_EQ(e.Text(), "ZZZ");
  auto bad = Req("x", "a", nullptr, 0.0f, 1);
  bad.logit_bias = {{999, 1.0f}};
  EXPECT_FALSE(b.Submit(std::move(bad), e.Cb()).ok());
}

}  // namespace
}  // namespace moe::inferd

namespace moe::inferd {
namespace {

// Speculation under a constraint: tokens the grammar forces (exactly one legal) are drafts that are
// always accepted, other drafts are verified under the row's mask; the tokens equal the plain run's
// (seeded sampling and greedy), constrained and free sequences batched together.
TEST_F(InferdConstraint, ForcedTokensAreAcceptedDraftsAndChangeNoToken) {
  const auto person = Schema(R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},
      "age":{"type":"integer","minimum":0,"maximum":120}},"required":["name","age"],"additionalProperties":false})");
  const auto answer = Schema(R"({"type":"object","properties":{"answer":{"enum":["yes","no"]}},"required":["answer"]})");
  auto run = [&](SpecMode mode, float temperature, std::vector<SeqOutput>* fins) {
    ToyModel m;
    BatcherConfig bc;
    bc.spec = SpecOptions{mode, 4};
    Batcher b(&m, bc);
    std::vector<std::unique_ptr<Done>> ds;
    for (int i = 0; i < 4; ++i) {
      ds.push_back(std::make_unique<Done>());
      const structured::ConstraintSpec* spec = i == 0 ? nullptr : i % 2 ? &person : &answer;
      EXPECT_TRUE(b.Submit(Req("s" + std::to_string(i), "<|assistant|>\n#" + std::to_string(i), spec, temperature, 7 + i),
                           ds.back()->Cb())
                      .ok());
    }
    std::vector<std::vector<int32_t>> out;
    for (auto& d : ds) {
      d->Wait();
      out.push_back(d->tokens);
      fins->push_back(d->fin);
    }
    return out;
  };
  for (float temperature : {0.0f, 1.0f}) {
    std::vector<SeqOutput> f0, f1;
    const auto plain = run(SpecMode::kOff, temperature, &f0);
    const auto spec = run(SpecMode::kNgram, temperature, &f1);
    EXPECT_EQ(spec, plain) << "T=" << temperature;
    for (int i = 1; i < 4; ++i) {
      EXPECT_EQ(f0[i].accepted_prediction_tokens, 0);
      // `{"name":"` / `"answer":"` keys and `es"` after `y`: forced, so drafted and accepted.
      EXPECT_GE(f1[i].accepted_prediction_tokens, 4) << "T=" << temperature << " seq " << i;
    }
  }
}

}  // namespace
}  // namespace moe::inferd
