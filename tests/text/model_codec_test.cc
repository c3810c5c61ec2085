// The gateway's TextCodec over common/text: chat requests as the gateway parses them render
// and tokenize like transformers, and generated GLM text comes back as OpenAI deltas.
#include "services/gateway/model_codec.h"

#include "common/text/chat.h"
#include "common/text/tokenizer.h"
#include "gtest/gtest.h"
#include "services/gateway/protocol.h"
#include "tests/text/test_util.h"

namespace moe::gateway {
namespace {

using namespace moe::text::testing;

TEST(TextModelCodec, GatewayChatRequestRendersLikeTransformers) {
  auto codec = ModelCodec::Load(DataDir() + "glm_tiny", "");
  ASSERT_TRUE(codec.ok()) << codec.status();
  const auto goldens = LoadJson(DataDir() + "goldens/chat.json");
  int checked = 0;
  for (const auto& g : goldens) {
    // The gateway protocol has no chat_template_kwargs: only default-kwarg GLM cases apply.
    // Tool definitions are skipped: the gateway keeps them in nlohmann::json, which sorts keys,
    // so the tools preamble lists keys in a different order than transformers (see
    // model_codec.h). Tool calls and results are covered (their arguments stay strings).
    if (g["format"] != "glm" || g["kwargs"].size() != 1 || !g["kwargs"].value("add_generation_prompt", false) ||
        !g["tools"].is_null()) {
      continue;
    }
    // OpenAI clients send tool-call arguments as a JSON string; the template needs the object.
    nlohmann::ordered_json messages = g["messages"];
    for (auto& m : messages) {
      if (m["role"] == "tool") m["tool_call_id"] = "call_0";  // required by the OpenAI schema
      if (!m.contains("tool_calls")) continue;
      for (auto& tc : m["tool_calls"]) tc["function"]["arguments"] = tc["function"]["arguments"].dump();
    }
    nlohmann::json body = {{"model", "m"}, {"messages", nlohmann::json::parse(messages.dump())}};
    if (!g["tools"].is_null()) body["tools"] = nlohmann::json::parse(g["tools"].dump());
    ProtocolLimits limits;
    limits.model_names = {"m"};
    ChatRequest req;
    auto err = ParseChatRequest(body.dump(), limits, &req);
    ASSERT_FALSE(err.has_value()) << g["name"] << ": " << err->message;
    auto text = (*codec)->RenderChat(req);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(*text, g["text"].get<std::string>()) << g["name"];
    auto ids = (*codec)->EncodeChat(req);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(*ids, g["ids"].get<std::vector<int32_t>>()) << g["name"];
    ++checked;
  }
  EXPECT_GE(checked, 2);
}

TEST(TextModelCodec, ToolHistoryConvertsLikeDirectRendering) {
  // The golden "tools" conversation without tool definitions: gateway form (string
  // arguments, tool_call_id) must render exactly as common/text renders the original.
  auto codec = ModelCodec::Load(DataDir() + "glm_tiny", "glm");
  ASSERT_TRUE(codec.ok()) << codec.status();
  nlohmann::ordered_json original;
  for (const auto& g : LoadJson(DataDir() + "goldens/chat.json")) {
    if (g["name"] == "tools") original = g["messages"];
  }
  ASSERT_TRUE(original.is_array());
  auto direct_req = text::ParseChatRequestJson(original.dump());
  ASSERT_TRUE(direct_req.ok()) << direct_req.status();
  auto direct = text::RenderChat(text::ChatFormat::kGlm, *direct_req);
  ASSERT_TRUE(direct.ok());
  nlohmann::ordered_json messages = original;
  for (auto& m : messages) {
    if (m["role"] == "tool") m["tool_call_id"] = "call_0";
    if (!m.contains("tool_calls")) continue;
    for (auto& tc : m["tool_calls"]) tc["function"]["arguments"] = tc["function"]["arguments"].dump();
  }
  ProtocolLimits limits;
  limits.model_names = {"m"};
  ChatRequest req;
  auto err = ParseChatRequest(nlohmann::json{{"model", "m"}, {"messages", nlohmann::json::parse(messages.dump())}}.dump(),
                              limits, &req);
  ASSERT_FALSE(err.has_value()) << err->message;
  auto via_gateway = (*codec)->RenderChat(req);
  ASSERT_TRUE(via_gateway.ok()) << via_gateway.status();
  EXPECT_EQ(*via_gateway, *direct);
  EXPECT_NE(direct->find("<arg_value>{\"temp\": \"C\"}</arg_value>"), std::string::npos);
}

TEST(TextModelCodec, TokenBytesAndParser) {
  auto codec = ModelCodec::Load(DataDir() + "glm_tiny", "glm");
  ASSERT_TRUE(codec.ok()) << codec.status();
  const text::Tokenizer* tok = CachedTokenizer("glm_tiny/tokenizer.json");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ((*codec)->TokenBytes(tok->TokenToId("<|endoftext|>")), "");   // stop token
  EXPECT_EQ((*codec)->TokenBytes(tok->TokenToId("</think>")), "</think>");  // parser needs it
  EXPECT_EQ((*codec)->StopTokenIds().size(), 3u);
  ChatRequest req;
  req.tools = nlohmann::json::parse(
      R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}])");
  req.tool_choice = "auto";
  auto p = (*codec)->NewChatParser(req);
  auto d1 = p->Push("Need weather.</think>On it.<tool_call>get_weather<arg_key>city</arg_key><arg_value>42");
  auto d2 = p->Push("</arg_value></tool_call>");
  auto d3 = p->Finish();
  EXPECT_EQ(d1.reasoning, "Need weather.");
  EXPECT_EQ(d1.content, "On it.");
  ASSERT_EQ(d2.tool_calls.size(), 1u);
  EXPECT_EQ(d2.tool_calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(d2.tool_calls[0]["function"]["arguments"], "{\"city\": \"42\"}");  // schema says string
  EXPECT_EQ(d2.tool_calls[0]["index"], 0);
  EXPECT_TRUE(d3.empty());
  EXPECT_FALSE(ModelCodec::Load(DataDir() + "glm_tiny", "chatml").ok());
}

}  // namespace
}  // namespace moe::gateway
