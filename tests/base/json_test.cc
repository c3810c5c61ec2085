// Depth-bounded parsing and never-throwing dumps of outside JSON (common/base/json.h).
#include "common/base/json.h"

#include <gtest/gtest.h>

#include <string>

namespace moe {
namespace {

std::string Nested(int depth, char open = '[', char close = ']') {
  return std::string(depth, open) + std::string(depth, close);
}

TEST(Json, NestingDepthCountsBracketsOutsideStrings) {
  EXPECT_EQ(JsonNestingDepth("1", 10), 0);
  EXPECT_EQ(JsonNestingDepth("{}", 10), 1);
  EXPECT_EQ(JsonNestingDepth(R"({"a":[{"b":[]}],"c":{}})", 10), 4);
  EXPECT_EQ(JsonNestingDepth(R"({"a":"[[[[[[[[[[[[[\"[[[[["})", 3), 1);  // brackets inside a string, escaped quote
  EXPECT_EQ(JsonNestingDepth(Nested(100000), 64), 65);                    // stops at the bound
  EXPECT_EQ(JsonNestingDepth("]]]][", 10), 1);                            // stray closers do not go negative
}

TEST(Json, ParseRefusesTooDeepBeforeBuilding) {
  auto ok = ParseJson(Nested(64), 64);
  EXPECT_TRUE(ok.ok()) << ok.status();
  auto deep = ParseJson(Nested(65), 64);
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(deep.status().message().find("deeper than 64"), absl::string_view::npos) << deep.status();
  // 10,000 levels in 40 KB (the size that crashed the gateway) is refused, objects too.
  std::string objects;
  for (int i = 0; i < 10000; ++i) objects += "{\"a\":";
  objects += "1" + std::string(10000, '}');
  EXPECT_FALSE(ParseOrderedJson(objects).ok());
}

TEST(Json, ParseNamesTheSyntaxErrorPosition) {
  auto bad = ParseJson("{\"a\": tru}");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("syntax error at byte"), absl::string_view::npos) << bad.status();
  EXPECT_FALSE(ParseJson("\"\xff\"").ok());  // invalid UTF-8 in a string is a syntax error, not a crash
  EXPECT_FALSE(ParseJson("").ok());
}

TEST(Json, DumpReplacesInvalidUtf8InsteadOfThrowing) {
  nlohmann::json j{{"message", std::string("unknown route GET /\xff\xfe\xc0\xaf")}};
  std::string out;
  ASSERT_NO_THROW(out = DumpJson(j));
  EXPECT_EQ(out, "{\"message\":\"unknown route GET /\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"}");
  nlohmann::ordered_json o{{"k", std::string("\x80")}};
  EXPECT_EQ(DumpJson(o), "{\"k\":\"\xEF\xBF\xBD\"}");
  // What it writes always parses back.
  EXPECT_TRUE(ParseJson(out).ok());
}

}  // namespace
}  // namespace moe
