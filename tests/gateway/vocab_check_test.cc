// The gateway refuses a tokenizer that does not fit the workers' model.
#include "services/gateway/vocab_check.h"

#include <gtest/gtest.h>

#include "tests/gateway/fake_worker.h"

namespace moe::gateway {
namespace {

WorkerSnapshot W(const std::string& name, int32_t vocab, bool alive = true) {
  WorkerSnapshot w;
  w.name = name;
  w.alive = alive;
  w.info.vocab_size = vocab;
  return w;
}

TEST(VocabCheck, TokenizerLargerThanTheModelIsRefusedNamingBothNumbers) {
  auto st = CheckTokenizerFitsWorkers("models/tiny-glm-random", 12288, {W("w0", 12288), W("w1", 384)});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  const std::string m(st.message());
  EXPECT_NE(m.find("12288"), std::string::npos) << m;
  EXPECT_NE(m.find("384"), std::string::npos) << m;
  EXPECT_NE(m.find("w1"), std::string::npos) << m;
  EXPECT_NE(m.find("models/tiny-glm-random"), std::string::npos) << m;
}

TEST(VocabCheck, FittingOrUnknownVocabulariesPass) {
  EXPECT_TRUE(CheckTokenizerFitsWorkers("t", 12288, {W("w0", 12288)}).ok());
  EXPECT_TRUE(CheckTokenizerFitsWorkers("t", 12000, {W("w0", 12288)}).ok());  // padded model vocab
  EXPECT_TRUE(CheckTokenizerFitsWorkers("t", 12288, {W("w0", 0)}).ok());      // not reported
  EXPECT_TRUE(CheckTokenizerFitsWorkers("t", 12288, {W("w0", 100, /*alive=*/false)}).ok());
  EXPECT_TRUE(CheckTokenizerFitsWorkers("t", 12288, {}).ok());
}

// A worker that comes up after the gateway started, serving a model with a
// smaller vocabulary, is kept out of rotation (reason in its last_error) and
// comes back once it serves a fitting model.
TEST(VocabCheck, LateWorkerWithASmallerVocabularyStaysOutOfRotation) {
  auto w0 = std::make_shared<testing::FakeWorker>("w0", "hi", 1);
  auto w1 = std::make_shared<testing::FakeWorker>("w1", "hi", 1);
  w0->vocab_size = 12288;
  w1->vocab_size = 384;
  SequencePlacer s({w0, w1}, {});
  s.SetAdmission([](const std::string& worker, const WorkerInfo& info) {
    return CheckTokenizerFitsWorker("tok", 12288, worker, info.vocab_size);
  });
  s.ProbeAll();
  EXPECT_EQ(s.alive_count(), 1);
  auto snap = s.Snapshot();
  EXPECT_TRUE(snap[0].alive);
  EXPECT_FALSE(snap[1].alive);
  EXPECT_NE(snap[1].last_error.find("vocab_size 384"), std::string::npos) << snap[1].last_error;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(s.Pick({int32_t(i), 2, 3}), 0);
  w1->vocab_size = 12288;  // restarted with the right model
  s.ProbeAll();
  EXPECT_EQ(s.alive_count(), 2);
}

}  // namespace
}  // namespace moe::gateway
