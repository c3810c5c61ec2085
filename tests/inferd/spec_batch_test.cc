// Speculative decoding inside continuous batching (batcher.h, batcher_spec.cc):
// sequences with and without drafts share steps with prefill chunks, and every
// sequence's tokens equal the run without speculation (greedy and seeded) on
// the toy model and on the engine (the trained demo model, which has a
// learned MTP head, and its int4 container), across batch compositions,
// prefill chunk sizes and expert cache budgets.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "services/inferd/batcher.h"
#include "services/inferd/engine_model.h"
#include "tests/inferd/seq_collector.h"
#include "tests/inferd/toy_model.h"

namespace moe::inferd {
namespace {

using testing::SeqCollector;

SeqRequest Req(const std::string& id, std::vector<int32_t> prompt, int n, float temperature = 0, uint64_t seed = 0) {
  SeqRequest r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.max_tokens = n;
  r.sampling.temperature = temperature;
  r.has_seed = true;
  r.seed = seed;
  return r;
}

std::vector<int32_t> Bytes(const std::string& s) { return std::vector<int32_t>(s.begin(), s.end()); }

struct RunResult {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<SeqOutput> fin;
  BatcherStats stats;
};

// All requests submitted together (one batch), each collected.
RunResult RunBatch(SequenceModel* m, const BatcherConfig& bc, const std::vector<SeqRequest>& reqs) {
  Batcher b(m, bc);
  std::vector<std::unique_ptr<SeqCollector>> cs;
  for (const auto& r : reqs) {
    cs.push_back(std::make_unique<SeqCollector>(std::chrono::seconds(120)));
    EXPECT_TRUE(b.Submit(r, cs.back()->Cb()).ok());
  }
  RunResult out;
  for (auto& c : cs) {
    c->Wait();
    out.tokens.push_back(c->tokens);
    out.fin.push_back(c->fin);
  }
  out.stats = b.stats();
  return out;
}

std::vector<SeqRequest> ToyRequests(float temperature) {
  const std::string chat = "<|user|>\nThe quick brown fox? The quick brown fox!\n<|assistant|>\n";
  return {Req("a", Bytes(chat), 40, temperature, 1), Req("b", Bytes("<|assistant|>\nThe quick"), 30, temperature, 2),
          Req("c", Bytes(std::string(70, 'x') + "<|assistant|>\n"), 48, temperature, 3)};
}

TEST(SpecBatcher, ToyTokensIdenticalForEveryModeDepthAndChunk) {
  for (float temperature : {0.0f, 1.0f}) {
    testing::ToyModel ref_model;
    BatcherConfig off;
    off.prefill_chunk = 16;
    const RunResult ref = RunBatch(&ref_model, off, ToyRequests(temperature));
    int64_t accepted = 0, rejected = 0;
    for (SpecMode mode : {SpecMode::kNgram, SpecMode::kAuto}) {
      for (int k : {1, 2, 4}) {
        for (int64_t chunk : {int64_t{5}, int64_t{128}}) {
          testing::ToyModel m;
          BatcherConfig bc;
          bc.prefill_chunk = chunk;
          bc.spec = SpecOptions{mode, k};
          const RunResult r = RunBatch(&m, bc, ToyRequests(temperature));
          for (size_t i = 0; i < ref.tokens.size(); ++i) {
            EXPECT_EQ(r.tokens[i], ref.tokens[i]) << "T=" << temperature << " " << SpecModeName(mode) << " K=" << k
                                                  << " chunk " << chunk << " seq " << i;
            EXPECT_EQ(r.fin[i].reason, ref.fin[i].reason);
            EXPECT_EQ(r.fin[i].completion_tokens, ref.fin[i].completion_tokens);
            accepted += r.fin[i].accepted_prediction_tokens;
            rejected += r.fin[i].rejected_prediction_tokens;
          }
          EXPECT_EQ(r.stats.spec.drafted, [&] {
            int64_t d = 0;
            for (const auto& f : r.fin) d += f.accepted_prediction_tokens + f.rejected_prediction_tokens;
            return d;
          }());
          // Fewer decode steps than tokens when drafts were accepted.
          if (r.stats.spec.accepted > 0) {
            EXPECT_GT(r.stats.spec.TokensPerStep(), 1.0);
          }
        }
      }
    }
    EXPECT_GT(accepted, 0) << "T=" << temperature;
    EXPECT_GT(rejected, 0) << "T=" << temperature;
  }
}

// The MTP layer of the trained demo model drafts inside the batcher; three
// sequences (prefill chunks of 5 interleaved with decodes and verifies) give
// Engine::Generate's tokens, with the in-process cache at every budget.
class SpecEngineBatcher : public ::testing::TestWithParam<std::string> {};

TEST_P(SpecEngineBatcher, TokensEqualTheEnginesWithoutSpeculation) {
  const std::string dir = std::string(MOE_SOURCE_DIR) + "/models/" + GetParam();
  const std::vector<std::vector<int32_t>> prompts = {
      {5, 9, 14, 3, 27, 40, 2, 8, 5, 9, 14, 3, 27}, {60, 61, 62}, {100, 7, 100, 7, 100, 7, 100, 33, 44, 55, 66, 77}};
  std::vector<std::vector<int32_t>> want;
  {
    auto e = Engine::Open(dir, EngineConfig{});
    ASSERT_TRUE(e.ok()) << e.status();
    for (const auto& p : prompts) {
      KvCache c = (*e)->NewCache();
      auto r = (*e)->Generate(p, 14, SamplingParams{}, c);
      ASSERT_TRUE(r.ok()) << r.status();
      want.push_back(r->tokens);
    }
  }
  std::vector<SeqRequest> reqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    reqs.push_back(Req(std::to_string(i), prompts[i], 14));
    reqs.back().stop_token_ids = {};
  }
  int64_t accepted = 0;
  for (int64_t budget : {int64_t{1} << 40, int64_t{0}}) {
    for (SpecMode mode : {SpecMode::kOff, SpecMode::kNgram, SpecMode::kMtp, SpecMode::kAuto}) {
      auto m = EngineModel::Open(dir, [&] {
        EngineConfig ec;
        ec.expert_budget_bytes = budget;
        return ec;
      }(), 0);
      ASSERT_TRUE(m.ok()) << m.status();
      if (mode == SpecMode::kMtp || mode == SpecMode::kAuto) {
        ASSERT_TRUE((*m)->set_mtp_drafts(true).ok());
      }
      BatcherConfig bc;
      bc.prefill_chunk = 5;
      bc.spec = SpecOptions{mode, 3};
      const RunResult r = RunBatch(m->get(), bc, reqs);
      for (size_t i = 0; i < prompts.size(); ++i) {
        // The engine stops after EOS; the batcher only at stop ids (none here): compare the engine's length.
        ASSERT_GE(r.tokens[i].size(), want[i].size());
        EXPECT_EQ(std::vector<int32_t>(r.tokens[i].begin(), r.tokens[i].begin() + want[i].size()), want[i])
            << GetParam() << " budget " << budget << " " << SpecModeName(mode) << " seq " << i;
      }
      if (mode == SpecMode::kMtp) accepted += r.stats.spec.accepted;
    }
  }
  EXPECT_GT(accepted, 0) << "the MTP head never drafted a token the model accepted";
}

INSTANTIATE_TEST_SUITE_P(Models, SpecEngineBatcher, ::testing::Values("glm-tiny-chat", "glm-tiny-chat-q4"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string s = i.param;
                           for (char& c : s) {
                             if (c == '-') c = '_';
                           }
                           return s;
                         });

TEST(SpecBatcher, MtpRefusedForAModelWithoutIt) {
  testing::ToyModel m;
  EXPECT_EQ(m.set_mtp_drafts(true).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(m.set_mtp_drafts(false).ok());
}

}  // namespace
}  // namespace moe::inferd
