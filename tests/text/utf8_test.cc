#include "common/text/utf8.h"

#include "gtest/gtest.h"

namespace moe::text {
namespace {

TEST(TextUtf8, SanitizeReplacesMaximalSubparts) {
  // Examples from Unicode 15 ch. 3, Table 3-8 (U+FFFD per maximal subpart).
  EXPECT_EQ(SanitizeUtf8("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "b\xEF\xBF\xBD" "c\xEF\xBF\xBD\xEF\xBF\xBD" "d");
  EXPECT_EQ(SanitizeUtf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(SanitizeUtf8("ok \xF0\x9F\x98\x80"), "ok \xF0\x9F\x98\x80");
  EXPECT_TRUE(IsValidUtf8("h\xC3\xA9"));
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // > U+10FFFF
}

TEST(TextUtf8, IncompleteTail) {
  EXPECT_EQ(IncompleteUtf8Tail("ab"), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("a\xE4"), 1u);
  EXPECT_EQ(IncompleteUtf8Tail("a\xE4\xB8"), 2u);
  EXPECT_EQ(IncompleteUtf8Tail("a\xE4\xB8\xAD"), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(IncompleteUtf8Tail("\xE0\x80"), 0u);  // can never complete
  EXPECT_EQ(IncompleteUtf8Tail("\x80"), 0u);
}

TEST(TextUtf8, ByteAlphabetRoundTrips) {
  for (int b = 0; b < 256; ++b) {
    int32_t cp;
    const std::string& s = ByteToUnicode()[b];
    DecodeUtf8(s, 0, &cp);
    EXPECT_EQ(UnicodeToByte(cp), b);
  }
  EXPECT_EQ(ByteToUnicode()[' '], "\xC4\xA0");  // 'Ġ'
}

}  // namespace
}  // namespace moe::text
