// GLM output parsing: the inverse of the assistant turn, whole and streamed.
#include "common/text/chat_parser.h"
#include "common/text/utf8.h"

#include "common/text/chat.h"
#include "gtest/gtest.h"

namespace moe::text {
namespace {

using ojson = nlohmann::ordered_json;

const ojson kTools = ojson::parse(R"([
  {"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{
     "city":{"type":"string"},"days":{"type":"integer"},"code":{"type":"string"}}}}}])");

ChatMessage Streamed(std::string_view text, bool in_reasoning, size_t chunk) {
  GlmOutputParser p(in_reasoning, kTools);
  OutputDelta all;
  auto add = [&](OutputDelta d) {
    all.reasoning += d.reasoning;
    all.content += d.content;
    for (auto& t : d.tool_calls) all.tool_calls.push_back(t);
  };
  for (size_t i = 0; i < text.size(); i += chunk) add(p.Push(text.substr(i, chunk)));
  add(p.Finish());
  ChatMessage m;
  m.reasoning_content = PyStrip(all.reasoning);
  m.content = PyStrip(all.content);
  m.tool_calls = all.tool_calls;
  return m;
}

TEST(TextGlmParser, RoundTripsRenderedAssistantTurn) {
  // Render an assistant turn (after the last user turn, so reasoning is kept) and parse the
  // part the model would have generated after "<|assistant|><think>".
  auto req = ParseChatRequestJson(R"({"messages":[
    {"role":"user","content":"Weather?"},
    {"role":"assistant","content":"Let me check.","reasoning_content":"Need <b>tools</b> for 東京.",
     "tool_calls":[{"type":"function","function":{"name":"get_weather","arguments":{"city":"Paris","days":2,"code":"007"}}},
                   {"type":"function","function":{"name":"get_weather","arguments":{"city":"東京","extra":{"k":[1,"2"]}}}}]}],
    "tools": [], "add_generation_prompt": false})");
  ASSERT_TRUE(req.ok()) << req.status();
  auto text = RenderChat(ChatFormat::kGlm, *req);
  ASSERT_TRUE(text.ok());
  const std::string head = "[gMASK]<sop><|user|>Weather?<|assistant|><think>";
  ASSERT_EQ(text->substr(0, head.size()), head);
  const std::string gen = text->substr(head.size());
  const ChatMessage m = GlmOutputParser::Parse(gen, /*start_in_reasoning=*/true, kTools);
  EXPECT_EQ(m.reasoning_content.value_or(""), "Need <b>tools</b> for 東京.");
  EXPECT_EQ(m.content.value_or(""), "Let me check.");
  ASSERT_EQ(m.tool_calls.size(), 2u);
  EXPECT_EQ(m.tool_calls[0].name, "get_weather");
  EXPECT_EQ(m.tool_calls[0].arguments, req->messages[1].tool_calls[0].arguments);
  EXPECT_EQ(m.tool_calls[1].arguments, req->messages[1].tool_calls[1].arguments);
  // Every chunking gives the same result.
  for (size_t chunk : {1, 2, 3, 5, 7, 64}) {
    const ChatMessage s = Streamed(gen, true, chunk);
    EXPECT_EQ(s.reasoning_content, m.reasoning_content) << chunk;
    EXPECT_EQ(s.content, m.content) << chunk;
    ASSERT_EQ(s.tool_calls.size(), 2u) << chunk;
    EXPECT_EQ(s.tool_calls[1].arguments, m.tool_calls[1].arguments) << chunk;
  }
}

TEST(TextGlmParser, StreamingNeverLeaksPartialTags) {
  GlmOutputParser p(true);
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
}

TEST(TextGlmParser, ThinkingOffAndOddEndings) {
  ChatMessage m = GlmOutputParser::Parse("Plain answer.", /*start_in_reasoning=*/false);
  EXPECT_FALSE(m.reasoning_content.has_value());
  EXPECT_EQ(*m.content, "Plain answer.");
  // The model opening <think> itself.
  m = GlmOutputParser::Parse("<think>hmm</think>ok", true);
  EXPECT_EQ(*m.reasoning_content, "hmm");
  EXPECT_EQ(*m.content, "ok");
  // Cut off inside reasoning: all of it is reasoning.
  m = GlmOutputParser::Parse("still thinking", true);
  EXPECT_EQ(*m.reasoning_content, "still thinking");
  EXPECT_EQ(*m.content, "");
  // Unterminated tool call: returned verbatim as content.
  m = GlmOutputParser::Parse("</think>x<tool_call>f<arg_key>a", true);
  EXPECT_EQ(*m.content, "x<tool_call>f<arg_key>a");
  EXPECT_TRUE(m.tool_calls.empty());
}

// Model output is untrusted too: an argument value nested far deeper than the JSON bound
// stays a string (parsing it into a value would make every later dump/copy recurse).
TEST(TextGlmParser, DeeplyNestedArgumentValueStaysAString) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  ChatMessage m = GlmOutputParser::Parse(
      "</think><tool_call>get_weather<arg_key>days</arg_key><arg_value>" + deep + "</arg_value></tool_call>", true);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  ASSERT_TRUE(m.tool_calls[0].arguments["days"].is_string());
  EXPECT_EQ(m.tool_calls[0].arguments["days"].get<std::string>(), deep);
  // Shallow JSON is still parsed.
  m = GlmOutputParser::Parse("</think><tool_call>get_weather<arg_key>days</arg_key><arg_value>[[2]]</arg_value></tool_call>",
                             true);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].arguments["days"], ojson::parse("[[2]]"));
}

}  // namespace
}  // namespace moe::text
