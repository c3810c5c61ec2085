#include "common/structured/schema_check.h"

#include <gtest/gtest.h>

namespace moe::structured {
namespace {

using ojson = nlohmann::ordered_json;

absl::Status Check(const char* schema, bool strict = true) {
  return PrepareJsonSchema(ojson::parse(schema), strict).status();
}

void ExpectRefused(const char* schema, const std::string& keyword, const std::string& path) {
  absl::Status st = Check(schema);
  ASSERT_FALSE(st.ok()) << schema;
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("'" + keyword + "'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
}

TEST(SchemaCheck, AcceptsWhatPydanticWrites) {
  // class Step(BaseModel): explanation: str; output: str
  // class Math(BaseModel): steps: list[Step]; final_answer: str; confidence: float | None = None
  const char* s = R"({"$defs":{"Step":{"properties":{"explanation":{"title":"Explanation","type":"string"},
    "output":{"title":"Output","type":"string"}},"required":["explanation","output"],"title":"Step",
    "type":"object","additionalProperties":false}},"properties":{"steps":{"items":{"$ref":"#/$defs/Step"},
    "title":"Steps","type":"array"},"final_answer":{"title":"Final Answer","type":"string"},
    "confidence":{"anyOf":[{"type":"number"},{"type":"null"}],"default":null,"title":"Confidence"},
    "kind":{"enum":["a","b"],"type":"string"},"n":{"type":"integer","minimum":0,"maximum":9}},
    "required":["steps","final_answer","confidence","kind","n"],"title":"Math","type":"object",
    "additionalProperties":false})";
  EXPECT_TRUE(Check(s).ok()) << Check(s);
}

TEST(SchemaCheck, RefusesEachKeywordTheMatcherCannotEnforceByName) {
  ExpectRefused(R"({"type":"object","properties":{"a":{"not":{"type":"string"}}}})", "not", "/properties/a");
  ExpectRefused(R"({"type":"object","if":{},"then":{}})", "if", "(root)");
  ExpectRefused(R"({"type":"array","uniqueItems":true})", "uniqueItems", "(root)");
  ExpectRefused(R"({"type":"array","contains":{"type":"integer"}})", "contains", "(root)");
  ExpectRefused(R"({"type":"number","multipleOf":0.5})", "multipleOf", "(root)");
  ExpectRefused(R"({"type":"string","pattern":"^a+$","maxLength":3})", "maxLength", "(root)");
  ExpectRefused(R"({"type":"string","format":"credit-card"})", "format", "(root)");
  ExpectRefused(R"({"allOf":[{"type":"object"},{"type":"object","required":["a"]}]})", "allOf", "(root)");
  ExpectRefused(R"({"anyOf":[{"type":"string"}],"minLength":2})", "minLength", "(root)");
  ExpectRefused(R"({"type":"object","dependentRequired":{"a":["b"]}})", "dependentRequired", "(root)");
  ExpectRefused(R"({"type":"string","maxLenght":3})", "maxLenght", "(root)");  // a typo is not "no limit"
  ExpectRefused(R"({"minLength":3})", "minLength", "(root)");                  // no type to act on
  ExpectRefused(R"({"$ref":"https://example.com/s.json"})", "$ref", "(root)");
  ExpectRefused(R"({"type":"string","maxLength":100000})", "maxLength", "(root)");
  ExpectRefused(R"({"type":"array","items":[{"type":"string"}]})", "items", "(root)");
  ExpectRefused(R"({"type":"string","pattern":"a{1,99999}"})", "pattern", "(root)");
}

TEST(SchemaCheck, OneOfIsKeptOnlyWhenItsBranchesCannotOverlap) {
  // Distinct types: the same values as anyOf.
  auto a = PrepareJsonSchema(ojson::parse(R"({"oneOf":[{"type":"string"},{"type":"integer"}]})"), true);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->contains("anyOf"));
  EXPECT_FALSE(a->contains("oneOf"));
  // A discriminated union through $refs (pydantic's tagged unions).
  auto b = PrepareJsonSchema(ojson::parse(R"({"$defs":{
      "Cat":{"type":"object","properties":{"pet":{"const":"cat"},"meow":{"type":"integer"}},"required":["pet"]},
      "Dog":{"type":"object","properties":{"pet":{"const":"dog"},"bark":{"type":"string"}},"required":["pet"]}},
      "oneOf":[{"$ref":"#/$defs/Cat"},{"$ref":"#/$defs/Dog"}],"discriminator":{"propertyName":"pet"}})"),
                             true);
  ASSERT_TRUE(b.ok()) << b.status();
  // number and integer overlap: "exactly one" cannot be enforced.
  ExpectRefused(R"({"oneOf":[{"type":"number"},{"type":"integer"}]})", "oneOf", "(root)");
  ExpectRefused(R"({"oneOf":[{"type":"object"},{"type":"object","required":["a"]}]})", "oneOf", "(root)");
}

TEST(SchemaCheck, NonStrictAllowsWhatJsonSchemaAllows) {
  auto s = PrepareJsonSchema(ojson::parse(R"({"type":"object","properties":{"a":{"type":"object"}}})"), false);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)["additionalProperties"], true);
  EXPECT_EQ((*s)["properties"]["a"]["additionalProperties"], true);
  auto t = PrepareJsonSchema(ojson::parse(R"({"type":"object","properties":{"a":{"type":"object"}}})"), true);
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->contains("additionalProperties"));
}

TEST(SchemaCheck, LargestRepeatCount) {
  EXPECT_EQ(LargestRepeatCount("a{3}b{2,17}c{5,}"), 17);
  EXPECT_EQ(LargestRepeatCount("no repeats"), 0);
}

}  // namespace
}  // namespace moe::structured
