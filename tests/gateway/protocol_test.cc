#include "services/gateway/protocol.h"

#include <gtest/gtest.h>

namespace moe::gateway {
namespace {

ProtocolLimits Limits() {
  ProtocolLimits l;
  l.model_names = {"m"};
  return l;
}

std::optional<ApiError> Chat(const std::string& body, ChatRequest* out = nullptr) {
  ChatRequest r;
  return ParseChatRequest(body, Limits(), out ? out : &r);
}
std::optional<ApiError> Comp(const std::string& body, CompletionRequest* out = nullptr) {
  CompletionRequest r;
  return ParseCompletionRequest(body, Limits(), out ? out : &r);
}

const char* kMsgs = R"("messages":[{"role":"user","content":"hi"}])";
std::string ChatWith(const std::string& extra) {
  return std::string("{\"model\":\"m\",") + kMsgs + (extra.empty() ? "" : "," + extra) + "}";
}

struct Case {
  std::string body;
  std::string param;
  std::string code;
};

TEST(GatewayProtocol, ValidChatParsesEveryField) {
  ChatRequest r;
  auto e = Chat(ChatWith(R"("max_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":40,"min_p":0.1,"seed":-3,"n":2,)"
                         R"("stop":["a","bc"],"presence_penalty":1,"frequency_penalty":-1,"logprobs":true,)"
                         R"("top_logprobs":3,"stream":true,"stream_options":{"include_usage":true},"user":"u")"),
                &r);
  ASSERT_FALSE(e) << e->message;
  EXPECT_EQ(r.common.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.common.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.common.sampling.top_p, 0.9f);
  EXPECT_EQ(r.common.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r.common.sampling.min_p, 0.1f);
  EXPECT_TRUE(r.common.sampling.has_seed);
  EXPECT_EQ(static_cast<int64_t>(r.common.sampling.seed), -3);
  EXPECT_EQ(r.common.n, 2);
  EXPECT_EQ(r.common.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(r.common.logprobs, 3);
  EXPECT_TRUE(r.common.stream);
  EXPECT_TRUE(r.common.include_usage);
  EXPECT_EQ(r.common.user, "u");
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].content, "hi");
}

TEST(GatewayProtocol, MaxCompletionTokensAndContentParts) {
  ChatRequest r;
  auto e = Chat(R"({"model":"m","max_completion_tokens":5,"messages":[{"role":"system","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},)"
                R"({"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},)"
                R"({"role":"tool","tool_call_id":"c","content":"42"}],)"
                R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":{"type":"function","function":{"name":"f"}}})",
                &r);
  ASSERT_FALSE(e) << e->message;
  EXPECT_EQ(r.common.max_tokens, 5);
  EXPECT_EQ(r.messages[0].content, "ab");
  EXPECT_TRUE(r.messages[1].tool_calls.is_array());
  EXPECT_EQ(r.messages[2].tool_call_id, "c");
  EXPECT_EQ(r.tool_choice, "f");
  EXPECT_TRUE(r.tool_choice_named);
}

TEST(GatewayProtocol, EveryChatErrorIsA400NamingTheField) {
  const std::vector<Case> cases = {
      {"not json", "", "invalid_json"},
      {"[1,2]", "", "invalid_json"},
      {R"({"messages":[{"role":"user","content":"x"}]})", "model", "missing_required_parameter"},
      {R"({"model":5,"messages":[{"role":"user","content":"x"}]})", "model", "invalid_type"},
      {R"({"model":"m"})", "messages", "missing_required_parameter"},
      {R"({"model":"m","messages":{}})", "messages", "invalid_type"},
      {R"({"model":"m","messages":[]})", "messages", "invalid_value"},
      {R"({"model":"m","messages":[3]})", "messages[0]", "invalid_type"},
      {R"({"model":"m","messages":[{"content":"x"}]})", "messages[0].role", "missing_required_parameter"},
      {R"({"model":"m","messages":[{"role":"wizard","content":"x"}]})", "messages[0].role", "invalid_value"},
      {R"({"model":"m","messages":[{"role":"user","content":7}]})", "messages[0].content", "invalid_type"},
      {R"({"model":"m","messages":[{"role":"user"}]})", "messages[0].content", "missing_required_parameter"},
      {R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]})", "messages[0].content[0].type",
       "unsupported_value"},
      {R"({"model":"m","messages":[{"role":"assistant","content":null}]})", "messages[0].content",
       "missing_required_parameter"},
      {R"({"model":"m","messages":[{"role":"tool","content":"x"}]})", "messages[0].tool_call_id",
       "missing_required_parameter"},
      {ChatWith(R"("max_tokens":0)"), "max_tokens", "invalid_value"},
      {ChatWith(R"("max_tokens":-5)"), "max_tokens", "invalid_value"},
      {ChatWith(R"("max_tokens":2.5)"), "max_tokens", "invalid_type"},
      {ChatWith(R"("max_tokens":"10")"), "max_tokens", "invalid_type"},
      {ChatWith(R"("max_completion_tokens":0)"), "max_completion_tokens", "invalid_value"},
      {ChatWith(R"("temperature":2.5)"), "temperature", "invalid_value"},
      {ChatWith(R"("temperature":-0.1)"), "temperature", "invalid_value"},
      {ChatWith(R"("temperature":"hot")"), "temperature", "invalid_type"},
      {ChatWith(R"("top_p":0)"), "top_p", "invalid_value"},
      {ChatWith(R"("top_p":1.5)"), "top_p", "invalid_value"},
      {ChatWith(R"("top_k":-2)"), "top_k", "invalid_value"},
      {ChatWith(R"("min_p":1.5)"), "min_p", "invalid_value"},
      {ChatWith(R"("presence_penalty":3)"), "presence_penalty", "invalid_value"},
      {ChatWith(R"("frequency_penalty":-3)"), "frequency_penalty", "invalid_value"},
      {ChatWith(R"("seed":"x")"), "seed", "invalid_type"},
      {ChatWith(R"("n":0)"), "n", "invalid_value"},
      {ChatWith(R"("n":17)"), "n", "invalid_value"},
      {ChatWith(R"("n":"2")"), "n", "invalid_type"},
      {ChatWith(R"("stop":5)"), "stop", "invalid_type"},
      {ChatWith(R"("stop":"")"), "stop", "invalid_value"},
      {ChatWith(R"("stop":["a",3])"), "stop[1]", "invalid_type"},
      {ChatWith(R"("stop":["a",""])"), "stop[1]", "invalid_value"},
      {ChatWith(R"("stop":["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17"])"), "stop",
       "invalid_value"},
      {ChatWith(R"("stream":"yes")"), "stream", "invalid_type"},
      {ChatWith(R"("stream_options":{"include_usage":true})"), "stream_options", "invalid_value"},
      {ChatWith(R"("stream":true,"stream_options":{"include_usage":1})"), "stream_options.include_usage",
       "invalid_type"},
      {ChatWith(R"("logprobs":1)"), "logprobs", "invalid_type"},
      {ChatWith(R"("top_logprobs":2)"), "top_logprobs", "invalid_value"},
      {ChatWith(R"("logprobs":true,"top_logprobs":21)"), "top_logprobs", "invalid_value"},
      {ChatWith(R"("user":1)"), "user", "invalid_type"},
      {ChatWith(R"("response_format":{"type":"json_schema"})"), "response_format.json_schema",
       "missing_required_parameter"},
      {ChatWith(R"("response_format":{"type":"json_schema","json_schema":{"schema":{},"strcit":true}})"),
       "response_format.json_schema.strcit", "unknown_parameter"},
      {ChatWith(R"("response_format":{"type":"json_schema","json_schema":{"schema":5}})"),
       "response_format.json_schema.schema", "invalid_type"},
      {ChatWith(R"("response_format":{"type":"yaml"})"), "response_format.type", "invalid_value"},
      {ChatWith(R"("response_format":{"type":"structural_tag"})"), "response_format.type", "unsupported_value"},
      {ChatWith(R"("response_format":"json")"), "response_format", "invalid_type"},
      {ChatWith(R"("response_format":{"type":"json_object"},"guided_regex":"a+")"), "guided_regex", "invalid_value"},
      {ChatWith(R"("structured_outputs":{"regex":"a","choice":["b"]})"), "structured_outputs.choice",
       "invalid_value"},
      {ChatWith(R"("structured_outputs":{"structural_tag":"{}"})"), "structured_outputs.structural_tag",
       "unsupported_parameter"},
      {ChatWith(R"("guided_choice":[])"), "guided_choice", "invalid_type"},
      {ChatWith(R"("guided_decoding_backend":"outlines")"), "guided_decoding_backend", "unsupported_value"},
      {ChatWith(R"("logit_bias":{"x5":1})"), "logit_bias.x5", "invalid_value"},
      {ChatWith(R"("logit_bias":{"5":101})"), "logit_bias.5", "invalid_value"},
      {ChatWith(R"("logit_bias":[1])"), "logit_bias", "invalid_type"},
      {ChatWith(R"("repetition_penalty":0)"), "repetition_penalty", "invalid_value"},
      {ChatWith(R"("min_tokens":-1)"), "min_tokens", "invalid_type"},
      {ChatWith(R"("max_tokens":3,"min_tokens":4)"), "min_tokens", "invalid_value"},
      {ChatWith(R"("ignore_eos":1)"), "ignore_eos", "invalid_type"},
      {ChatWith(R"("stop_token_ids":[1,-1])"), "stop_token_ids[1]", "invalid_type"},
      {ChatWith(R"("skip_special_tokens":"no")"), "skip_special_tokens", "invalid_type"},
      {ChatWith(R"("reasoning_effort":3)"), "reasoning_effort", "invalid_type"},
      {ChatWith(R"("temprature":0.5)"), "temprature", "unknown_parameter"},
      {ChatWith(R"("functions":[])"), "functions", "unknown_parameter"},
      {ChatWith(R"("echo":true)"), "echo", "unknown_parameter"},
      {ChatWith(R"("tools":{})"), "tools", "invalid_type"},
      {ChatWith(R"("tools":[{"type":"retrieval"}])"), "tools[0].type", "invalid_value"},
      {ChatWith(R"("tools":[{"type":"function","function":{"name":""}}])"), "tools[0].function.name", "invalid_type"},
      {ChatWith(R"("tools":[{"type":"function","function":{"name":"f","parameters":"x"}}])"),
       "tools[0].function.parameters", "invalid_type"},
      {ChatWith(R"("tool_choice":"auto")"), "tool_choice", "invalid_value"},
      {ChatWith(R"("tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"sometimes")"), "tool_choice",
       "invalid_value"},
      {ChatWith(R"("tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}})"),
       "tool_choice.function.name", "invalid_value"},
      {ChatWith(R"("parallel_tool_calls":"no")"), "parallel_tool_calls", "invalid_type"},
      {R"({"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"name":"f","arguments":"{not json"}}]}]})",
       "messages[0].tool_calls[0].function.arguments", "invalid_json"},
  };
  for (const auto& c : cases) {
    auto e = Chat(c.body);
    ASSERT_TRUE(e.has_value()) << c.body;
    EXPECT_EQ(e->http_status, 400) << c.body;
    EXPECT_EQ(e->type, "invalid_request_error") << c.body;
    EXPECT_EQ(e->param, c.param) << c.body << " -> " << e->message;
    EXPECT_EQ(e->code, c.code) << c.body << " -> " << e->message;
    EXPECT_FALSE(e->message.empty());
    auto j = e->ToJson();
    ASSERT_TRUE(j.contains("error"));
    for (const char* k : {"message", "type", "param", "code"}) EXPECT_TRUE(j["error"].contains(k)) << k;
  }
}

// JSON nested ~10,000 deep in a 40 KB body (inside tools[].function.parameters, or inside a
// tool call's arguments string) overflowed the stack of whatever walked it: it is a 400 now,
// before anything is built from it.
TEST(GatewayProtocol, JsonDeeperThanTheLimitIsA400) {
  std::string schema;
  for (int i = 0; i < 10000; ++i) schema += R"({"type":"object","properties":{"a":)";
  schema += "{}";
  for (int i = 0; i < 10000; ++i) schema += "}}";
  auto e = Chat(ChatWith(R"("tools":[{"type":"function","function":{"name":"f","parameters":)" + schema + "}}]"));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->http_status, 400);
  EXPECT_EQ(e->code, "json_too_deep");
  EXPECT_NE(e->message.find("--max-json-depth"), std::string::npos) << e->message;
  // A deep arguments string: the body itself is shallow, the JSON inside the string is not.
  const std::string args = std::string(10000, '[') + std::string(10000, ']');
  e = Chat(std::string(R"({"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[)") +
           R"({"type":"function","function":{"name":"f","arguments":")" + args + R"("}}]}]})");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code, "json_too_deep");
  EXPECT_EQ(e->param, "messages[0].tool_calls[0].function.arguments");
  // Completions bodies too; and the limit is configurable.
  EXPECT_EQ(Comp(R"({"model":"m","prompt":"x","user":)" + args + "}")->code, "json_too_deep");
  ProtocolLimits l = Limits();
  l.max_json_depth = 3;
  ChatRequest r;
  EXPECT_FALSE(ParseChatRequest(ChatWith(R"("stop":["a"])"), l, &r));  // depth 3 accepted
  EXPECT_EQ(ParseChatRequest(ChatWith(R"("tools":[{"type":"function","function":{"name":"f"}}])"), l, &r)->code,
            "json_too_deep");
}

TEST(GatewayProtocol, EverySpellingOfStructuredOutputs) {
  using Kind = structured::ConstraintSpec::Kind;
  struct Want {
    std::string extra;
    Kind kind;
    std::string param;
    bool strict;
  };
  const std::vector<Want> wants = {
      {R"("response_format":{"type":"text"})", Kind::kNone, "", false},
      {R"("response_format":{"type":"json_object"})", Kind::kJsonObject, "response_format", false},
      {R"("response_format":{"type":"json_object","schema":{"type":"object"}})", Kind::kJsonSchema, "response_format",
       false},
      {R"("response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":{"type":"object"}}})",
       Kind::kJsonSchema, "response_format", true},
      {R"("structured_outputs":{"json":{"type":"string"}})", Kind::kJsonSchema, "structured_outputs.json", false},
      {R"("structured_outputs":{"regex":"[0-9]+"})", Kind::kRegex, "structured_outputs.regex", false},
      {R"("structured_outputs":{"choice":["a","b"]})", Kind::kChoice, "structured_outputs.choice", false},
      {R"("structured_outputs":{"grammar":"root ::= \"a\""})", Kind::kGrammar, "structured_outputs.grammar", false},
      {R"("structured_outputs":{"grammar":"start: \"a\""})", Kind::kLark, "structured_outputs.grammar", false},
      {R"("structured_outputs":{"json_object":true})", Kind::kJsonObject, "structured_outputs.json_object", false},
      {R"("guided_json":"{\"type\":\"integer\"}")", Kind::kJsonSchema, "guided_json", false},
      {R"("guided_regex":"a|b")", Kind::kRegex, "guided_regex", false},
      {R"("guided_choice":["yes","no"])", Kind::kChoice, "guided_choice", false},
      {R"("guided_grammar":"root ::= [a-z]+","guided_decoding_backend":"xgrammar")", Kind::kGrammar, "guided_grammar",
       false},
      {R"("json_schema":{"type":"object"})", Kind::kJsonSchema, "json_schema", false},
      {R"("grammar":"root ::= \"x\"")", Kind::kGrammar, "grammar", false},
  };
  for (const auto& w : wants) {
    ChatRequest r;
    auto e = Chat(ChatWith(w.extra), &r);
    ASSERT_FALSE(e) << w.extra << ": " << e->message;
    EXPECT_EQ(r.common.structured.kind, w.kind) << w.extra;
    EXPECT_EQ(r.common.structured.param, w.param) << w.extra;
    EXPECT_EQ(r.common.structured.strict, w.strict) << w.extra;
    CompletionRequest c;  // the completions endpoint takes the same fields
    auto ce = Comp(R"({"model":"m","prompt":"p",)" + w.extra + "}", &c);
    ASSERT_FALSE(ce) << w.extra << ": " << ce->message;
    EXPECT_EQ(c.common.structured.kind, w.kind) << w.extra;
  }
  // The schema keeps the client's key order (the order properties are generated in).
  ChatRequest r;
  ASSERT_FALSE(Chat(ChatWith(R"("guided_json":{"type":"object","properties":{"zeta":{},"alpha":{}}})"), &r));
  EXPECT_LT(r.common.structured.source.find("zeta"), r.common.structured.source.find("alpha"));
}

TEST(GatewayProtocol, SamplingExtrasParse) {
  ChatRequest r;
  auto e = Chat(ChatWith(R"("repetition_penalty":1.3,"min_tokens":4,"ignore_eos":true,"stop_token_ids":[7,9],)"
                         R"("include_stop_str_in_output":true,"skip_special_tokens":false,"logit_bias":{"12":-100,"5":2.5},)"
                         R"("parallel_tool_calls":false,"reasoning_effort":"high")"),
                &r);
  ASSERT_FALSE(e) << e->message;
  EXPECT_FLOAT_EQ(r.common.sampling.repetition_penalty, 1.3f);
  EXPECT_EQ(r.common.min_tokens, 4);
  EXPECT_TRUE(r.common.ignore_eos);
  EXPECT_EQ(r.common.stop_token_ids, (std::vector<int32_t>{7, 9}));
  EXPECT_TRUE(r.common.include_stop_str_in_output);
  EXPECT_FALSE(r.common.skip_special_tokens);
  ASSERT_EQ(r.common.logit_bias.size(), 2u);
  EXPECT_FALSE(r.parallel_tool_calls);
  EXPECT_EQ(r.reasoning_effort, "high");
}

TEST(GatewayProtocol, CompletionPromptForms) {
  CompletionRequest r;
  ASSERT_FALSE(Comp(R"({"model":"m","prompt":"abc"})", &r));
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text, "abc");
  EXPECT_EQ(r.common.max_tokens, 16);
  CompletionRequest r2;
  ASSERT_FALSE(Comp(R"({"model":"m","prompt":[1,2,3],"logprobs":2,"max_tokens":4})", &r2));
  ASSERT_EQ(r2.prompts.size(), 1u);
  EXPECT_TRUE(r2.prompts[0].is_tokens);
  EXPECT_EQ(r2.prompts[0].tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(r2.common.logprobs, 2);
  CompletionRequest r3;
  ASSERT_FALSE(Comp(R"({"model":"m","prompt":[[4,5]]})", &r3));
  EXPECT_EQ(r3.prompts[0].tokens, (std::vector<int32_t>{4, 5}));
  CompletionRequest r4;
  ASSERT_FALSE(Comp(R"({"model":"m","prompt":["x"],"best_of":1})", &r4));
  EXPECT_EQ(r4.prompts[0].text, "x");
  CompletionRequest r5;  // a batch: strings and token lists
  ASSERT_FALSE(Comp(R"({"model":"m","prompt":["a",[6,7],"c"],"echo":true})", &r5));
  ASSERT_EQ(r5.prompts.size(), 3u);
  EXPECT_EQ(r5.prompts[1].tokens, (std::vector<int32_t>{6, 7}));
  EXPECT_EQ(r5.prompts[2].text, "c");
  EXPECT_TRUE(r5.echo);
}

TEST(GatewayProtocol, EveryCompletionErrorIsA400) {
  const std::vector<Case> cases = {
      {R"({"model":"m"})", "prompt", "missing_required_parameter"},
      {R"({"model":"m","prompt":5})", "prompt", "invalid_type"},
      {R"({"model":"m","prompt":[]})", "prompt", "invalid_value"},
      {R"({"model":"m","prompt":["a",5]})", "prompt[1]", "invalid_type"},
      {R"({"model":"m","prompt":["a",[]]})", "prompt[1]", "invalid_value"},
      {R"({"model":"m","prompt":"a","echo":true,"logprobs":1})", "echo", "unsupported_value"},
      {R"({"model":"m","prompt":"a","tools":[]})", "tools", "unknown_parameter"},
      {R"({"model":"m","prompt":[1,-2]})", "prompt[1]", "invalid_type"},
      {R"({"model":"m","prompt":[1,"x"]})", "prompt[1]", "invalid_type"},
      {R"({"model":"m","prompt":"a","logprobs":6})", "logprobs", "invalid_value"},
      {R"({"model":"m","prompt":"a","logprobs":true})", "logprobs", "invalid_type"},
      {R"({"model":"m","prompt":"a","suffix":"z"})", "suffix", "unsupported_parameter"},
      {R"({"model":"m","prompt":"a","best_of":3})", "best_of", "unsupported_value"},
      {R"({"model":"m","prompt":"a","max_tokens":0})", "max_tokens", "invalid_value"},
  };
  for (const auto& c : cases) {
    auto e = Comp(c.body);
    ASSERT_TRUE(e.has_value()) << c.body;
    EXPECT_EQ(e->http_status, 400);
    EXPECT_EQ(e->param, c.param) << c.body << " -> " << e->message;
    EXPECT_EQ(e->code, c.code) << c.body << " -> " << e->message;
  }
}

TEST(GatewayProtocol, UnknownModelIs404ModelNotFound) {
  for (auto e : {Chat(R"({"model":"other","messages":[{"role":"user","content":"x"}]})"),
                 Comp(R"({"model":"x","prompt":"a"})")}) {
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->http_status, 404);
    EXPECT_EQ(e->type, "not_found_error");
    EXPECT_EQ(e->code, "model_not_found");
    EXPECT_EQ(e->param, "model");
    EXPECT_NE(e->message.find("serves: m"), std::string::npos) << e->message;
  }
}

TEST(GatewayProtocol, ResponseJsonShapes) {
  ResponseMeta meta{"chatcmpl-1", 123, "m"};
  ChoiceResult c;
  c.text = "hi";
  c.finish_reason = "stop";
  c.has_logprobs = true;
  c.logprobs.push_back({"h", -0.5f, {{"h", -0.5f}, {"x", -2.0f}}});
  Usage u{3, 2, 0};
  auto j = ChatCompletionJson(meta, {c}, u);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "hi");
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["bytes"][0], 'h');
  EXPECT_EQ(j["usage"]["total_tokens"], 5);
  auto k = CompletionJson(meta, {c}, u);
  EXPECT_EQ(k["object"], "text_completion");
  EXPECT_EQ(k["choices"][0]["logprobs"]["tokens"][0], "h");
  EXPECT_EQ(k["choices"][0]["logprobs"]["top_logprobs"][0]["x"], -2.0);
  // Partial UTF-8 never breaks the JSON.
  ChoiceResult bad;
  bad.text = std::string("a\xE2\x82", 3);
  bad.finish_reason = "length";
  EXPECT_NO_THROW(ChatCompletionJson(meta, {bad}, u).dump());
  auto chunk = ChatChunkJson(meta, 0, {{"content", "x"}}, nullptr, "", true);
  EXPECT_TRUE(chunk["usage"].is_null());
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(UsageChunkJson(meta, true, u)["choices"].size(), 0u);
}

}  // namespace
}  // namespace moe::gateway

namespace moe::gateway {
namespace {

// Speculative decoding's drafts reach the client as OpenAI's predicted-output usage fields.
TEST(ProtocolUsage, CompletionTokensDetailsCarryTheDrafts) {
  Usage u;
  u.prompt_tokens = 5;
  u.completion_tokens = 9;
  u.accepted_prediction_tokens = 4;
  u.rejected_prediction_tokens = 2;
  const nlohmann::json j = UsageJson(u);
  EXPECT_EQ(j["total_tokens"], 14);
  EXPECT_EQ(j["completion_tokens_details"]["accepted_prediction_tokens"], 4);
  EXPECT_EQ(j["completion_tokens_details"]["rejected_prediction_tokens"], 2);
}

}  // namespace
}  // namespace moe::gateway
