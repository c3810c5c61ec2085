// Output parsing by family, the inverse of each template's assistant turn: an assistant
// message (reasoning, content, tool calls) is rendered through the real template, the part
// the model would generate after the generation prompt is cut out, and parsing it -- whole,
// and streamed in every fixed chunk size and in random cuts -- gives the message back.
#include "common/text/chat_parser.h"

#include <chrono>
#include <random>

#include "common/text/chat_template.h"
#include "common/text/utf8.h"
#include "gtest/gtest.h"
#include "tests/text/test_util.h"

namespace moe::text {
namespace {

using ojson = nlohmann::ordered_json;

const ojson kTools = ojson::parse(R"([
  {"type":"function","function":{"name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{
     "city":{"type":"string"},"days":{"type":"integer"},"code":{"type":"string"},"extra":{"type":"object"}}}}}])");

OutputDelta Streamed(ChatFamily f, std::string_view text, bool in_reasoning, const std::vector<size_t>& cuts) {
  ChatOutputParser p(f, in_reasoning, kTools);
  OutputDelta all;
  auto add = [&](OutputDelta d) {
    all.reasoning += d.reasoning;
    all.content += d.content;
    for (auto& t : d.tool_calls) all.tool_calls.push_back(t);
  };
  size_t at = 0;
  for (size_t c : cuts) {
    add(p.Push(text.substr(at, c - at)));
    at = c;
  }
  add(p.Push(text.substr(at)));
  add(p.Finish());
  all.reasoning = PyStrip(all.reasoning);
  all.content = PyStrip(all.content);
  return all;
}

std::vector<std::vector<size_t>> Cuttings(size_t n) {
  std::vector<std::vector<size_t>> out;
  for (size_t chunk : {1, 2, 3, 5, 7, 13, 64}) {
    std::vector<size_t> c;
    for (size_t i = chunk; i < n; i += chunk) c.push_back(i);
    out.push_back(c);
  }
  std::mt19937 rng(7);
  for (int k = 0; k < 20; ++k) {
    std::vector<size_t> c;
    for (size_t i = 0; i < n; i += 1 + rng() % 9) {
      if (i) c.push_back(i);
    }
    out.push_back(c);
  }
  return out;
}

struct Family {
  const char* template_file;
  ChatFamily family;
  const char* end_of_turn;  // what the template writes after the assistant turn (not model output)
  bool string_arguments;
};

// The assistant message every family gets back; reasoning only where the template renders it.
ojson Assistant(bool string_args, bool reasoning) {
  ojson a1 = ojson::parse(R"({"city": "Paris", "days": 2, "code": "007"})");
  ojson a2 = ojson::parse(R"({"city": "東京", "extra": {"k": [1, "2"]}})");
  auto args = [&](const ojson& a) { return string_args ? ojson(a.dump()) : a; };
  ojson m = {{"role", "assistant"},
             {"content", "Let me check <b>both</b>."},
             {"tool_calls", ojson::array({ojson{{"id", "call00001"}, {"type", "function"},
                                                {"function", {{"name", "get_weather"}, {"arguments", args(a1)}}}},
                                          ojson{{"id", "call00002"}, {"type", "function"},
                                                {"function", {{"name", "get_weather"}, {"arguments", args(a2)}}}}})}};
  if (reasoning) m["reasoning_content"] = "Need tools for 東京 & Paris.";
  return m;
}

TEST(ChatOutputParser, RoundTripsEachFamilysRenderedTurn) {
  const std::vector<Family> families = {
      {"glm-tiny.jinja", ChatFamily::kGlm, "", false},
      {"glm-4.5.jinja", ChatFamily::kGlm, "", false},
      {"glm-4.6.jinja", ChatFamily::kGlm, "", false},
      {"glm-5.3-flash.jinja", ChatFamily::kGlm, "", false},
      {"qwen3.jinja", ChatFamily::kQwen, "<|im_end|>\n", false},
      {"deepseek-v3.jinja", ChatFamily::kDeepSeekV3, "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", true},
      {"deepseek-v3.1.jinja", ChatFamily::kDeepSeekV31, "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", true},
  };
  for (const Family& fam : families) {
    SCOPED_TRACE(fam.template_file);
    auto t = ChatTemplate::FromSource(testing::ReadFile(testing::DataDir() + "chat_templates/" + fam.template_file),
                                      fam.template_file, {{"bos_token", "<B>"}, {"eos_token", "<E>"}});
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(DetectChatFamily((*t)->Literals(), ""), fam.family);
    EXPECT_EQ((*t)->WantsStringArguments(true), fam.string_arguments);
    const bool with_reasoning = fam.family != ChatFamily::kDeepSeekV3 && fam.family != ChatFamily::kDeepSeekV31;
    const ojson assistant = Assistant(fam.string_arguments, with_reasoning);
    ChatInputs prompt;
    prompt.messages = ojson::array({ojson{{"role", "user"}, {"content", "Weather?"}}});
    prompt.tools = kTools;
    prompt.add_generation_prompt = true;
    auto head = (*t)->Render(prompt);
    ChatInputs full = prompt;
    full.messages.push_back(assistant);
    full.add_generation_prompt = false;
    auto whole = (*t)->Render(full);
    ASSERT_TRUE(head.ok() && whole.ok()) << head.status() << whole.status();
    ASSERT_EQ(whole->text.compare(0, head->text.size(), head->text), 0) << head->text << "\n---\n" << whole->text;
    std::string gen = whole->text.substr(head->text.size());
    const std::string eot = fam.end_of_turn;
    if (!eot.empty()) {
      ASSERT_GE(gen.size(), eot.size());
      ASSERT_EQ(gen.substr(gen.size() - eot.size()), eot) << gen;
      gen.resize(gen.size() - eot.size());
    }
    const bool in_reasoning = PromptOpensReasoning(head->text);
    const OutputDelta m = ChatOutputParser::Parse(fam.family, gen, in_reasoning, kTools);
    EXPECT_EQ(m.reasoning, with_reasoning ? "Need tools for 東京 & Paris." : "") << gen;
    EXPECT_EQ(m.content, "Let me check <b>both</b>.") << gen;
    ASSERT_EQ(m.tool_calls.size(), 2u) << gen;
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(m.tool_calls[i].name, "get_weather");
      const ojson& want = assistant["tool_calls"][i]["function"]["arguments"];
      const ojson got = m.tool_calls[i].arguments.is_string() ? ojson::parse(m.tool_calls[i].arguments.get<std::string>())
                                                              : m.tool_calls[i].arguments;
      EXPECT_EQ(got, want.is_string() ? ojson::parse(want.get<std::string>()) : want) << gen;
    }
    for (const auto& cuts : Cuttings(gen.size())) {
      const OutputDelta s = Streamed(fam.family, gen, in_reasoning, cuts);
      ASSERT_EQ(s.reasoning, m.reasoning);
      ASSERT_EQ(s.content, m.content);
      ASSERT_EQ(s.tool_calls.size(), 2u);
      ASSERT_EQ(s.tool_calls[1].arguments, m.tool_calls[1].arguments);
    }
  }
}

TEST(ChatOutputParser, StreamingNeverLeaksPartialTags) {
  ChatOutputParser p(ChatFamily::kGlm, true);
  OutputDelta d = p.Push("thinking</thi");
  EXPECT_EQ(d.reasoning, "thinking");
  d = p.Push("nk>Answer <tool_ca");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "Answer ");
  d = p.Push("ll>f<arg_key>x</arg_key><arg_value>1</arg_value>");
  EXPECT_TRUE(d.empty());
  d = p.Push("</tool_call>");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].name, "f");
  EXPECT_EQ(d.tool_calls[0].arguments, ojson::parse(R"({"x":1})"));

  ChatOutputParser ds(ChatFamily::kDeepSeekV31, false);
  d = ds.Push("Sure<\xEF\xBD\x9C" "tool");
  EXPECT_EQ(d.content, "Sure");
  d = ds.Push("\xE2\x96\x81" "calls\xE2\x96\x81" "begin\xEF\xBD\x9C>");
  EXPECT_TRUE(d.empty());
}

TEST(ChatOutputParser, ThinkingOffAndOddEndings) {
  OutputDelta m = ChatOutputParser::Parse(ChatFamily::kGlm, "Plain answer.", false);
  EXPECT_EQ(m.reasoning, "");
  EXPECT_EQ(m.content, "Plain answer.");
  m = ChatOutputParser::Parse(ChatFamily::kGlm, "<think>hmm</think>ok", true);  // the model opens <think> itself
  EXPECT_EQ(m.reasoning, "hmm");
  EXPECT_EQ(m.content, "ok");
  m = ChatOutputParser::Parse(ChatFamily::kGlm, "still thinking", true);  // cut off inside reasoning
  EXPECT_EQ(m.reasoning, "still thinking");
  EXPECT_EQ(m.content, "");
  m = ChatOutputParser::Parse(ChatFamily::kGlm, "</think>x<tool_call>f<arg_key>a", true);  // unterminated call
  EXPECT_EQ(m.content, "x<tool_call>f<arg_key>a");
  EXPECT_TRUE(m.tool_calls.empty());
  // Qwen: a call whose body is not JSON stays text.
  m = ChatOutputParser::Parse(ChatFamily::kQwen, "<think>\nr\n</think>\n\nok <tool_call>\nnot json\n</tool_call>", false);
  EXPECT_EQ(m.reasoning, "r");
  EXPECT_EQ(m.content, "ok <tool_call>\nnot json\n</tool_call>");
  // Plain family: only a leading think block is reasoning.
  m = ChatOutputParser::Parse(ChatFamily::kPlain, "<think>a</think>b <think>c</think>", false);
  EXPECT_EQ(m.reasoning, "a");
  EXPECT_EQ(m.content, "b <think>c</think>");
}

TEST(ChatOutputParser, DetectsFamilyFromTemplateThenModelType) {
  EXPECT_EQ(DetectChatFamily({"<tool_call>{{ n }}<arg_key>"}, ""), ChatFamily::kGlm);
  EXPECT_EQ(DetectChatFamily({"<tool_call>\n{\"name\": "}, "llama"), ChatFamily::kQwen);
  EXPECT_EQ(DetectChatFamily({"hello"}, "glm_moe_dsa"), ChatFamily::kGlm);
  EXPECT_EQ(DetectChatFamily({"hello"}, "deepseek_v3"), ChatFamily::kDeepSeekV3);
  EXPECT_EQ(DetectChatFamily({"hello"}, "qwen3_moe"), ChatFamily::kQwen);
  EXPECT_EQ(DetectChatFamily({"hello"}, "llama"), ChatFamily::kPlain);
  EXPECT_TRUE(PromptOpensReasoning("<|assistant|><think>\n"));
  EXPECT_FALSE(PromptOpensReasoning("<|assistant|></think>"));
}

// Model output is untrusted too: an argument value nested far deeper than the JSON bound
// stays a string (parsing it into a value would make every later dump/copy recurse).
TEST(ChatOutputParser, DeeplyNestedArgumentValueStaysAString) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  OutputDelta m = ChatOutputParser::Parse(
      ChatFamily::kGlm, "</think><tool_call>get_weather<arg_key>days</arg_key><arg_value>" + deep + "</arg_value></tool_call>",
      true);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  ASSERT_TRUE(m.tool_calls[0].arguments["days"].is_string());
  EXPECT_EQ(m.tool_calls[0].arguments["days"].get<std::string>(), deep);
  m = ChatOutputParser::Parse(ChatFamily::kGlm,
                              "</think><tool_call>get_weather<arg_key>days</arg_key><arg_value>[[2]]</arg_value></tool_call>", true);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].arguments["days"], ojson::parse("[[2]]"));
  // Qwen's body nested too deep is not a call: it stays text.
  m = ChatOutputParser::Parse(ChatFamily::kQwen, "<tool_call>{\"name\": \"f\", \"arguments\": " + deep + "}</tool_call>", false);
  EXPECT_TRUE(m.tool_calls.empty());
}

// A long tool call streamed a character at a time (a model's output, token by token) is
// linear in every family: the closing tag is searched for only in what arrived since the last
// look. Rescanning the held call on every push was quadratic: 300k characters took minutes
// (found by the output_parser fuzzer).
TEST(ChatOutputParser, LongToolCallStreamedByteByByteIsLinear) {
  std::string value;
  for (int i = 0; i < 150000; ++i) value += "<x";  // a '<' every other byte: no memchr shortcut
  struct Case {
    ChatFamily family;
    std::string text;
  };
  const std::vector<Case> cases = {
      {ChatFamily::kGlm, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>" + value + "</arg_value></tool_call>"},
      {ChatFamily::kQwen, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"" + value + "\"}}\n</tool_call>"},
  };
  for (const Case& c : cases) {
    ChatOutputParser p(c.family, /*start_in_reasoning=*/false, kTools);
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<ToolCall> calls;
    for (char ch : c.text) {
      for (auto& t : p.Push(std::string_view(&ch, 1)).tool_calls) calls.push_back(std::move(t));
    }
    for (auto& t : p.Finish().tool_calls) calls.push_back(std::move(t));
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_EQ(calls.size(), 1u) << ChatFamilyName(c.family);
    EXPECT_EQ(calls[0].arguments["city"], value) << ChatFamilyName(c.family);
    EXPECT_LT(secs, 5.0) << ChatFamilyName(c.family);  // linear: tens of milliseconds; quadratic: minutes
  }
  // A closing tag split across pushes is still found.
  ChatOutputParser q(ChatFamily::kGlm, false, kTools);
  std::vector<ToolCall> got;
  for (std::string_view piece :
       {"<tool_call>get_weather<arg_key>city</arg_key><arg_value>P</arg_value></tool_", "ca", "ll>"}) {
    for (auto& t : q.Push(piece).tool_calls) got.push_back(std::move(t));
  }
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].arguments["city"], "P");
}

}  // namespace
}  // namespace moe::text
