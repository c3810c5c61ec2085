// Streaming detokenization: chunks concatenate to Decode() and never split a character.
#include "common/text/detokenizer.h"

#include <thread>
#include <vector>

#include "common/text/tokenizer.h"
#include "common/text/utf8.h"
#include "gtest/gtest.h"
#include "tests/text/test_util.h"

namespace moe::text {
namespace {

using namespace moe::text::testing;

void ExpectStreamsLikeDecode(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip, const std::string& label) {
  StreamDetokenizer s(t, skip);
  std::string all;
  for (int32_t id : ids) {
    std::string chunk = s.Push(id);
    EXPECT_TRUE(IsValidUtf8(chunk)) << label;
    EXPECT_LE(s.held_bytes(), 3u) << label;
    all += chunk;
  }
  all += s.Finish();
  EXPECT_EQ(all, t.Decode(ids, skip)) << label;
}

TEST(TextStreamDetokenizer, MatchesDecodeOnGoldens) {
  for (const char* name : {"glm_tiny", "deepseek_v3"}) {
    const auto g = LoadJson(DataDir() + "goldens/" + name + ".json");
    const Tokenizer* tok = CachedTokenizer(g["tokenizer"].get<std::string>());
    ASSERT_NE(tok, nullptr);
    for (const auto& c : g["cases"]) {
      const auto ids = c["ids"].get<std::vector<int32_t>>();
      ExpectStreamsLikeDecode(*tok, ids, false, c["label"].get<std::string>());
      ExpectStreamsLikeDecode(*tok, ids, true, c["label"].get<std::string>());
    }
    for (const auto& r : g["decode_runs"]) {
      ExpectStreamsLikeDecode(*tok, r["ids"].get<std::vector<int32_t>>(), false, "decode_run");
    }
  }
}

TEST(TextStreamDetokenizer, HoldsSplitCharacterUntilComplete) {
  const Tokenizer* tok = CachedTokenizer("glm_tiny/tokenizer.json");
  ASSERT_NE(tok, nullptr);
  // U+1D522 (F0 9D 94 A2): the tiny tokenizer spells it with byte tokens.
  const auto ids = tok->Encode("\xF0\x9D\x94\xA2", {.parse_special = true, .add_special_tokens = false});
  ASSERT_GE(ids.size(), 2u);
  StreamDetokenizer s(*tok, false);
  std::string got;
  for (size_t i = 0; i + 1 < ids.size(); ++i) got += s.Push(ids[i]);
  EXPECT_EQ(got, "");
  EXPECT_GT(s.held_bytes(), 0u);
  got += s.Push(ids.back());
  EXPECT_EQ(got, "\xF0\x9D\x94\xA2");
  // A stream cut inside a character ends in one U+FFFD, as Decode does.
  StreamDetokenizer cut(*tok, false);
  std::string part = cut.Push(ids[0]);
  part += cut.Finish();
  EXPECT_EQ(part, tok->Decode(std::vector<int32_t>{ids[0]}));
  EXPECT_EQ(part, "\xEF\xBF\xBD");
}

}  // namespace
}  // namespace moe::text

namespace moe::text {
namespace {

TEST(TextConcurrency, EncodeFromManyThreadsMatchesSingleThread) {
  const Tokenizer* tok = moe::text::testing::CachedTokenizer("glm_tiny/tokenizer.json");
  ASSERT_NE(tok, nullptr);
  const auto g = moe::text::testing::LoadJson(moe::text::testing::DataDir() + "goldens/glm_tiny.json");
  std::vector<std::string> texts;
  for (const auto& c : g["cases"]) texts.push_back(moe::text::testing::Unhex(c["hex"].get<std::string>()));
  std::vector<std::vector<std::vector<int32_t>>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep) {
        for (const auto& s : texts) got[t].push_back(tok->Encode(s));
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) {
    for (size_t i = 0; i < got[t].size(); ++i) {
      EXPECT_EQ(got[t][i], g["cases"][i % texts.size()]["ids"].get<std::vector<int32_t>>());
    }
  }
}

}  // namespace
}  // namespace moe::text
