// Bad tokenizer files and bad text give clear errors or the documented replacement.
#include <algorithm>
#include <string>

#include "common/text/tokenizer.h"
#include "common/text/utf8.h"
#include "gtest/gtest.h"
#include "tests/text/test_util.h"

namespace moe::text {
namespace {

using namespace moe::text::testing;
using ojson = nlohmann::ordered_json;

// A minimal GLM-shaped byte-level BPE: the 256 byte tokens, one merge, one special token.
ojson GlmJson() {
  ojson vocab = ojson::object();
  for (int b = 0; b < 256; ++b) vocab[ByteToUnicode()[b]] = b;
  vocab["ab"] = 256;
  return ojson{{"version", "1.0"},
               {"added_tokens", ojson::array({{{"id", 257}, {"content", "<|user|>"}, {"special", true}}})},
               {"normalizer", nullptr},
               {"pre_tokenizer",
                {{"type", "Sequence"},
                 {"pretokenizers", ojson::array({{{"type", "Split"},
                                                  {"pattern", {{"Regex", "\\p{L}+|\\s+"}}},
                                                  {"behavior", "Isolated"},
                                                  {"invert", false}},
                                                 {{"type", "ByteLevel"}, {"add_prefix_space", false},
                                                  {"use_regex", false}}})}}},
               {"post_processor", nullptr},
               {"decoder", {{"type", "ByteLevel"}}},
               {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", ojson::array({"a b"})}}}};
}

TEST(TextBadInput, MinimalTokenizerLoads) {
  auto t = Tokenizer::FromJson(GlmJson().dump(), "min.json");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->Encode("ab<|user|>"), (std::vector<int32_t>{256, 257}));
}

// plain_spans: no added token is matched overlapping them; outside them matching is as usual.
TEST(TextBadInput, PlainSpansNeverMatchAddedTokens) {
  auto t = Tokenizer::FromJson(GlmJson().dump(), "min.json");
  ASSERT_TRUE(t.ok()) << t.status();
  const Tokenizer& tok = **t;
  const int32_t user = 257;
  auto count = [&](std::string_view text, std::vector<TextSpan> spans) {
    const auto ids = tok.Encode(text, {.parse_special = true, .add_special_tokens = false, .plain_spans = spans});
    EXPECT_EQ(tok.Decode(ids), IsValidUtf8(text) ? std::string(text) : SanitizeUtf8(text));
    return std::count(ids.begin(), ids.end(), user);
  };
  EXPECT_EQ(count("<|user|>x<|user|>", {}), 2);
  EXPECT_EQ(count("<|user|>x<|user|>", {{0, 8}}), 1);        // the client's copy is plain
  EXPECT_EQ(count("<|user|>x<|user|>", {{0, 9}, {9, 17}}), 0);
  EXPECT_EQ(count("<|user|>", {{0, 4}}), 0);                // starts in the span, ends outside
  EXPECT_EQ(count("<|user|>", {{4, 8}}), 0);                // starts outside, ends in the span
  EXPECT_EQ(count("<|us<|user|>", {{0, 4}}), 1);            // a marker right after the span is kept
  EXPECT_EQ(count("a<|user|>b<|user|>", {{1, 2}}), 1);      // a span that holds no marker changes nothing
  // Ill-formed bytes inside a span are replaced without moving the spans off their text.
  EXPECT_EQ(count("\xff<|user|>\xfe<|user|>", {{0, 9}}), 1);
  EXPECT_EQ(count("\xff\xff<|user|>", {{2, 10}}), 0);
}

void ExpectError(const ojson& j, const std::string& needle) {
  auto t = Tokenizer::FromJson(j.dump(), "test.json");
  ASSERT_FALSE(t.ok()) << needle;
  const std::string msg(t.status().message());
  EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  EXPECT_NE(msg.find("test.json"), std::string::npos) << msg;
}

TEST(TextBadInput, UnknownComponentsAreNamed) {
  ojson j = GlmJson();
  j["normalizer"] = {{"type", "Lowercase"}};
  ExpectError(j, "normalizer type 'Lowercase' is not supported");
  j = GlmJson();
  j["pre_tokenizer"]["pretokenizers"].push_back({{"type", "Metaspace"}});
  ExpectError(j, "pre_tokenizer type 'Metaspace' is not supported");
  j = GlmJson();
  j["model"]["type"] = "Unigram";
  ExpectError(j, "model type 'Unigram' is not supported");
  j = GlmJson();
  j["decoder"] = {{"type", "WordPiece"}};
  ExpectError(j, "decoder type 'WordPiece' is not supported");
  j = GlmJson();
  j["post_processor"] = {{"type", "Fancy"}};
  ExpectError(j, "post_processor type 'Fancy' is not supported");
  j = GlmJson();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Isolated"}};
  ExpectError(j, "no ByteLevel component");
  j = GlmJson();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  ExpectError(j, "split regex '(unclosed' does not compile");
  j = GlmJson();
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways";
  ExpectError(j, "unknown behavior 'Sideways'");
  j = GlmJson();
  j["model"]["byte_fallback"] = true;
  ExpectError(j, "byte_fallback");
}

TEST(TextBadInput, MalformedFiles) {
  ExpectError(ojson::array(), "not a JSON object");
  auto t = Tokenizer::FromJson("{\"model\": {", "broken.json");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(std::string(t.status().message()).find("broken.json: malformed JSON"), std::string::npos);
  ojson j = GlmJson();
  j["model"]["merges"].push_back("notatoken alsonot");
  ExpectError(j, "missing from the vocab");
  j = GlmJson();
  j["model"].erase("vocab");
  ExpectError(j, "missing 'vocab'");
  auto missing = Tokenizer::FromFile(DataDir() + "nope/tokenizer.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  auto not_gzip = Tokenizer::FromFile(DataDir() + "glm_tiny/chat_template.jinja.gz");
  EXPECT_FALSE(not_gzip.ok());
}

TEST(TextBadInput, InvalidUtf8EncodesAsReplacementCharacters) {
  const Tokenizer* tok = CachedTokenizer("glm_tiny/tokenizer.json");
  ASSERT_NE(tok, nullptr);
  const Tokenizer& t = *tok;
  // Documented contract: ill-formed input == the same text with U+FFFD per maximal subpart.
  EXPECT_EQ(t.Encode("a\x80z"), t.Encode("a\xEF\xBF\xBDz"));
  EXPECT_EQ(t.Encode("\xE4\xB8!"), t.Encode("\xEF\xBF\xBD!"));       // truncated: one U+FFFD
  EXPECT_EQ(t.Encode("\xC0\xAF"), t.Encode("\xEF\xBF\xBD\xEF\xBF\xBD"));  // overlong: two
  // Decoding a lone byte token gives U+FFFD, never raw invalid bytes.
  const int32_t id = t.TokenToId("\xC3\xA4");  // byte-alphabet char for byte 0xE4
  ASSERT_GE(id, 0);
  EXPECT_EQ(t.Decode(std::vector<int32_t>{id}), "\xEF\xBF\xBD");
  // Unknown ids are skipped, as HF does.
  EXPECT_EQ(t.Decode(std::vector<int32_t>{-5, 1 << 30}), "");
}

}  // namespace
}  // namespace moe::text
