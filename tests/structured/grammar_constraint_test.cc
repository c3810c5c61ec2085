#include "common/structured/grammar_constraint.h"

#include <gtest/gtest.h>

#include <random>

#include "absl/strings/str_format.h"

#include "common/sampling/sampler.h"
#include "nlohmann/json.hpp"

namespace moe::structured {
namespace {

// A small vocabulary: every byte 0..255 as itself, some multi-byte pieces, </think> and
// <tool_call> as single marker tokens, and EOS (text "", a stop id).
struct Vocab {
  std::vector<std::string> texts;
  int32_t eos = 0, end_think = 0, tool_call = 0;
  Vocab() {
    for (int b = 0; b < 256; ++b) texts.push_back(std::string(1, static_cast<char>(b)));
    for (const char* p : {"{\"", "\":", "\", \"", "\"}", "true", "false", "null", "name", "  ", "\n", "ab", "12"}) {
      texts.push_back(p);
    }
    end_think = static_cast<int32_t>(texts.size());
    texts.push_back("</think>");
    tool_call = static_cast<int32_t>(texts.size());
    texts.push_back("<tool_call>");
    eos = static_cast<int32_t>(texts.size());
    texts.push_back("");
  }
};

std::unique_ptr<ConstraintCompiler> Compiler(const Vocab& v) {
  auto c = ConstraintCompiler::Create(v.texts, {v.eos}, static_cast<int32_t>(v.texts.size()) + 7);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

// Samples with random logits under the constraint until a stop token; returns the text.
std::string Generate(const Vocab& v, TokenConstraint& c, uint64_t seed, int max_tokens, bool* stopped) {
  std::mt19937_64 rng(seed);
  const int32_t V = c.vocab_size();
  std::vector<float> logits(V);
  std::vector<uint32_t> mask(MaskWords(V));
  std::string out;
  *stopped = false;
  std::unordered_map<int32_t, int32_t> counts;
  for (int i = 0; i < max_tokens; ++i) {
    for (auto& x : logits) x = std::uniform_real_distribution<float>(-3, 3)(rng);
    logits[v.eos] += 2.0f;  // the model wants to stop early: the mask must keep it from doing so
    c.FillMask(mask);
    SampleOptions opt;
    opt.allowed = mask;
    SampleParams p;
    p.temperature = 0.8f;
    const int32_t t = Sample(logits, p, counts, -1, rng, opt).token;
    EXPECT_TRUE(c.Accept(t).ok()) << "sampled an illegal token " << t;
    if (t == v.eos) {
      *stopped = true;
      EXPECT_TRUE(c.Terminated());
      break;
    }
    out += t < static_cast<int32_t>(v.texts.size()) ? v.texts[t] : "?";
  }
  return out;
}

TEST(GrammarConstraint, EveryDrawFollowsTheSchemaAndEndsOnlyWhenComplete) {
  Vocab v;
  auto comp = Compiler(v);
  ASSERT_TRUE(comp);
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::kJsonSchema;
  spec.source = R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},
      "n":{"type":"integer","minimum":0,"maximum":99},"ok":{"type":"boolean"}},"required":["name","n","ok"],
      "additionalProperties":false})";
  spec.max_whitespace = 2;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    auto c = comp->NewConstraint(spec, {v.eos});
    ASSERT_TRUE(c.ok()) << c.status();
    bool stopped = false;
    const std::string out = Generate(v, **c, seed, 200, &stopped);
    ASSERT_TRUE(stopped) << out;
    auto j = nlohmann::json::parse(out, nullptr, false);
    std::string hex;
    for (unsigned char ch : out) hex += absl::StrFormat("%02x ", ch);
    ASSERT_FALSE(j.is_discarded()) << out << "\n" << hex;
    EXPECT_EQ(j.size(), 3u) << out;
    auto chars = [](const std::string& u) {
      size_t n = 0;
      for (unsigned char ch : u) n += (ch & 0xC0) != 0x80;
      return n;
    };
    EXPECT_TRUE(j["name"].is_string() && chars(j["name"].get<std::string>()) <= 6) << out;
    EXPECT_TRUE(j["n"].is_number_integer() && j["n"].get<int>() >= 0 && j["n"].get<int>() <= 99) << out;
    EXPECT_TRUE(j["ok"].is_boolean()) << out;
    EXPECT_EQ(out.find("   "), std::string::npos) << "whitespace run above the bound: " << out;
  }
}

TEST(GrammarConstraint, TheConstraintStartsAfterTheReasoningBlock) {
  Vocab v;
  auto comp = Compiler(v);
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::kRegex;
  spec.source = "(yes|no)";
  spec.reasoning_end = "</think>";
  spec.text_excludes = {"</think>", "<tool_call>"};
  auto c = comp->NewConstraint(spec, {v.eos});
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<uint32_t> mask(MaskWords((*c)->vocab_size()));
  (*c)->FillMask(mask);
  EXPECT_TRUE(MaskAllows(mask, 'x'));            // free reasoning
  EXPECT_FALSE(MaskAllows(mask, v.eos));         // but it may not end the output
  EXPECT_FALSE(MaskAllows(mask, v.tool_call));   // nor write a marker
  for (char ch : std::string("hmm")) ASSERT_TRUE((*c)->Accept(static_cast<unsigned char>(ch)).ok());
  ASSERT_TRUE((*c)->Accept(v.end_think).ok());
  (*c)->FillMask(mask);
  EXPECT_FALSE(MaskAllows(mask, 'x'));
  EXPECT_TRUE(MaskAllows(mask, 'y'));
  EXPECT_TRUE(MaskAllows(mask, 'n'));
  ASSERT_TRUE((*c)->Accept('n').ok());
  EXPECT_EQ((*c)->ForcedToken(), 'o');  // exactly one legal token: a free draft
  ASSERT_TRUE((*c)->Accept('o').ok());
  EXPECT_EQ((*c)->ForcedToken(), v.eos);
  EXPECT_FALSE((*c)->Accept('x').ok());
}

TEST(GrammarConstraint, DraftMasksEqualStepByStepMasksAndLeaveTheStateAlone) {
  Vocab v;
  auto comp = Compiler(v);
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::kChoice;
  spec.source = R"(["abc", "abd", "x"])";
  auto c = comp->NewConstraint(spec, {v.eos});
  ASSERT_TRUE(c.ok()) << c.status();
  TokenConstraint& k = **c;
  const size_t W = MaskWords(k.vocab_size());
  const std::vector<int32_t> drafts = {'a', 'b', 'c'};
  std::vector<uint32_t> masks(W * (drafts.size() + 1));
  EXPECT_EQ(k.FillDraftMasks(drafts, masks), 4);
  EXPECT_EQ(k.accepted(), 0);
  std::vector<uint32_t> one(W);
  for (size_t i = 0; i <= drafts.size(); ++i) {
    k.FillMask(one);
    EXPECT_EQ(std::vector<uint32_t>(masks.begin() + i * W, masks.begin() + (i + 1) * W), one) << i;
    if (i < drafts.size()) {
      ASSERT_TRUE(k.Accept(drafts[i]).ok());
    }
  }
  k.Rollback(3);
  // An illegal draft stops the masks there.
  EXPECT_EQ(k.FillDraftMasks(std::vector<int32_t>{'a', 'z', 'c'}, masks), 2);
  EXPECT_EQ(k.accepted(), 0);
}

TEST(GrammarConstraint, ToolCallsRequiredNamedAndSingle) {
  Vocab v;
  auto comp = Compiler(v);
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::kToolCalls;
  spec.tool_syntax = {"<tool_call>", " ", "json", "</tool_call>", ""};
  spec.tools.push_back({"get_weather", nlohmann::ordered_json::parse(
                                           R"({"type":"object","properties":{"city":{"type":"string","enum":["Paris","Rome"]}},
                                               "required":["city"]})"),
                        true});
  spec.tools.push_back({"noop", nlohmann::ordered_json::parse(R"({"type":"object","properties":{}})"), true});
  spec.named_tool = true;
  spec.text_excludes = {"<tool_call>", "</tool_call>"};
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    auto c = comp->NewConstraint(spec, {v.eos});
    ASSERT_TRUE(c.ok()) << c.status();
    bool stopped = false;
    std::string out = Generate(v, **c, seed, 200, &stopped);
    ASSERT_TRUE(stopped) << out;
    ASSERT_EQ(out.rfind("<tool_call>get_weather ", 0), 0u) << out;
    ASSERT_GE(out.size(), 12u);
    ASSERT_EQ(out.substr(out.size() - 12), "</tool_call>") << out;
    auto args = nlohmann::json::parse(out.substr(23, out.size() - 23 - 12), nullptr, false);
    ASSERT_FALSE(args.is_discarded()) << out;
    EXPECT_TRUE(args["city"] == "Paris" || args["city"] == "Rome") << out;
  }
}

TEST(GrammarConstraint, RefusesBadGrammarsWithTheMatchersMessage) {
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::kGrammar;
  spec.source = "root ::= (";
  EXPECT_FALSE(ValidateConstraint(spec).ok());
  spec.kind = ConstraintSpec::Kind::kRegex;
  spec.source = "a(";
  EXPECT_FALSE(ValidateConstraint(spec).ok());
  spec.kind = ConstraintSpec::Kind::kLark;
  spec.source = "start: \"a\" | \"b\"";
  EXPECT_TRUE(ValidateConstraint(spec).ok()) << ValidateConstraint(spec);
  spec.kind = ConstraintSpec::Kind::kJsonSchema;
  spec.source = R"({"type":"object","not":{}})";
  absl::Status st = ValidateConstraint(spec);
  EXPECT_NE(st.message().find("'not'"), std::string::npos) << st;
}

TEST(GrammarConstraint, SpecRoundTripsThroughJson) {
  ConstraintSpec s;
  s.kind = ConstraintSpec::Kind::kToolCalls;
  s.tools.push_back({"f", nlohmann::ordered_json::parse(R"({"type":"object"})"), false});
  s.single_call = true;
  s.reasoning_end = "</think>";
  s.text_excludes = {"<a>"};
  auto back = ConstraintSpecFromJson(ToJson(s));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ToJson(*back), ToJson(s));
  EXPECT_FALSE(ConstraintSpecFromJson(R"({"kind":"nope"})").ok());
}

}  // namespace
}  // namespace moe::structured
