// The gateway refuses a tokenizer that does not fit the workers' model.
#include "services/gateway/vocab_check.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace moe::gateway
