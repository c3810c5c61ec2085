#include "services/gateway/serving.h"

#include <gtest/gtest.h>

#include <optional>

#include "services/gateway/byte_codec.h"
#include "services/gateway/sse.h"
#include "tests/gateway/fake_worker.h"

namespace moe::gateway {
namespace {

using json = nlohmann::json;
using testing::FakeWorker;

class TestClient final : public ClientStream {
 public:
  std::string written;
  std::atomic<bool> gone{false};
  int writes_before_gone = -1;  // >= 0: the client leaves after this many writes
  bool Write(std::string_view d) override {
    if (gone) return false;
    written.append(d);
    if (writes_before_gone >= 0 && --writes_before_gone < 0) gone = true;
    return true;
  }
  bool Gone() override { return gone; }
};

struct Stack {
  explicit Stack(std::string script, int step_ms = 1, int workers = 1, AdmissionConfig ac = {},
                 std::chrono::milliseconds keepalive = std::chrono::milliseconds(15000))
      : admission(ac) {
    std::vector<std::shared_ptr<Worker>> ws;
    for (int i = 0; i < workers; ++i) {
      fakes.push_back(std::make_shared<FakeWorker>("w" + std::to_string(i), script, step_ms));
      ws.push_back(fakes.back());
    }
    placer = std::make_unique<SequencePlacer>(ws, SequencePlacerConfig{});
    ServingConfig sc;
    sc.model_name = "m";
    sc.max_context = 256;
    sc.sse_keepalive = keepalive;
    serving = std::make_unique<OpenAIServing>(sc, &codec, placer.get(), &admission, &metrics);
  }
  HttpReply Unary(const std::string& body, bool chat = true) {
    auto p = chat ? serving->PrepareChat(body, "") : serving->PrepareCompletion(body, "");
    if (auto* e = std::get_if<ApiError>(&p)) return ErrorReply(*e);
    TestClient io;
    return serving->RunUnary(*std::get<std::unique_ptr<PreparedRequest>>(p), &io);
  }
  std::vector<json> Stream(const std::string& body, bool chat, TestClient* io, int* status = nullptr,
                           std::optional<ApiError>* unsent = nullptr) {
    auto p = chat ? serving->PrepareChat(body, "") : serving->PrepareCompletion(body, "");
    EXPECT_TRUE(std::holds_alternative<std::unique_ptr<PreparedRequest>>(p));
    OpenAIServing::StreamOutcome st = serving->RunStream(*std::get<std::unique_ptr<PreparedRequest>>(p), io);
    if (status) *status = st.status;
    if (unsent) *unsent = st.error;
    std::string buf = io->written;
    std::vector<json> out;
    for (auto& d : SseParse(&buf)) out.push_back(d == "[DONE]" ? json("[DONE]") : json::parse(d));
    return out;
  }
  ByteCodec codec;
  Metrics metrics;
  AdmissionController admission;
  std::vector<std::shared_ptr<FakeWorker>> fakes;
  std::unique_ptr<SequencePlacer> placer;
  std::unique_ptr<OpenAIServing> serving;
};

const std::string kChat = R"({"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":0)";

TEST(GatewayServing, ChatUnaryReturnsTheTextAndUsage) {
  Stack s("Hello there!");
  HttpReply r = s.Unary(kChat + "}");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello there!");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  std::string prompt = ByteCodec::RenderChat([] {
    ChatRequest c;
    c.messages.push_back({"user", "hi", "", "", nullptr, "", {}});
    return c;
  }());
  EXPECT_EQ(j["usage"]["prompt_tokens"], static_cast<int>(prompt.size()));
  EXPECT_EQ(j["usage"]["completion_tokens"], 13);  // 12 bytes + EOS
  EXPECT_EQ(j["usage"]["total_tokens"], static_cast<int>(prompt.size()) + 13);
}

TEST(GatewayServing, MaxTokensGivesLength) {
  Stack s("Hello there!");
  json j = json::parse(s.Unary(kChat + R"(,"max_tokens":4})").body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hell");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 4);
}

TEST(GatewayServing, StopStringNeverLeaksAndCancelsTheSequence) {
  Stack s("one two STOP three four five six seven eight");
  json j = json::parse(s.Unary(kChat + R"(,"stop":["ST","xyz"]})").body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "one two ");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(s.fakes[0]->finished.load(), 0);  // the worker did not run to the end
  TestClient io;
  auto events = s.Stream(kChat + R"(,"stream":true,"stop":"STOP"})", true, &io);
  std::string text;
  for (auto& e : events) {
    if (e.is_string()) continue;
    auto& d = e["choices"][0]["delta"];
    if (d.contains("content")) text += d["content"].get<std::string>();
  }
  EXPECT_EQ(text, "one two ");
  EXPECT_EQ(io.written.find("STOP"), std::string::npos);
}

TEST(GatewayServing, StreamingChatChunksUsageAndDone) {
  Stack s("abc");
  TestClient io;
  auto ev = s.Stream(kChat + R"(,"stream":true,"stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":2})",
                     true, &io);
  ASSERT_GE(ev.size(), 5u);
  EXPECT_EQ(ev.back(), json("[DONE]"));
  EXPECT_EQ(ev[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(ev[0].contains("usage") && ev[0]["usage"].is_null());
  EXPECT_EQ(ev[0]["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 2u);
  json usage = ev[ev.size() - 2];
  EXPECT_EQ(usage["choices"].size(), 0u);
  EXPECT_EQ(usage["usage"]["completion_tokens"], 4);
  json fin = ev[ev.size() - 3];
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "stop");
}

TEST(GatewayServing, CompletionsStreamAndLogprobs) {
  Stack s("xyz");
  TestClient io;
  auto ev = s.Stream(R"({"model":"m","prompt":"p","stream":true,"logprobs":1,"temperature":0})", false, &io);
  std::string text;
  for (auto& e : ev) {
    if (e.is_string()) continue;
    text += e["choices"][0]["text"].get<std::string>();
    EXPECT_EQ(e["object"], "text_completion");
  }
  EXPECT_EQ(text, "xyz");
  json j = json::parse(s.Unary(R"({"model":"m","prompt":[1,2],"logprobs":2,"temperature":0})", false).body);
  EXPECT_EQ(j["choices"][0]["text"], "xyz");
  EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"].size(), 4u);  // x y z EOS
  EXPECT_EQ(j["choices"][0]["logprobs"]["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 2);
}

TEST(GatewayServing, SeedReproducibleAndNChoicesDiffer) {
  Stack s("", 1, 2);
  const std::string body = R"({"model":"m","messages":[{"role":"user","content":"x"}],"temperature":1,"seed":42,"n":3,"max_tokens":12})";
  json a = json::parse(s.Unary(body).body);
  json b = json::parse(s.Unary(body).body);
  ASSERT_EQ(a["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a["choices"][i]["index"], i);
    EXPECT_EQ(a["choices"][i]["message"]["content"], b["choices"][i]["message"]["content"]);
  }
  EXPECT_NE(a["choices"][0]["message"]["content"], a["choices"][1]["message"]["content"]);
  EXPECT_EQ(a["usage"]["completion_tokens"], 36);
}

TEST(GatewayServing, PromptLongerThanContextIs400NeverTruncated) {
  Stack s("x");
  std::string big(300, 'a');
  HttpReply r = s.Unary(R"({"model":"m","prompt":")" + big + R"("})", false);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "context_length_exceeded");
  HttpReply r2 = s.Unary(R"({"model":"m","prompt":"abc","max_tokens":254})", false);
  EXPECT_EQ(r2.status, 400);
  EXPECT_EQ(json::parse(r2.body)["error"]["param"], "max_tokens");
  HttpReply r3 = s.Unary(R"({"model":"m","prompt":[999]})", false);
  EXPECT_EQ(r3.status, 400);
  EXPECT_EQ(s.fakes[0]->started.load(), 0);
}

TEST(GatewayServing, ClientGoneCancelsEverySequence) {
  Stack s(std::string(500, 'q'), 2);
  TestClient io;
  io.writes_before_gone = 3;
  int status = 0;
  s.Stream(kChat + R"(,"stream":true,"n":2})", true, &io, &status);
  EXPECT_EQ(status, 499);
  EXPECT_EQ(s.fakes[0]->cancels.load(), 2);
  EXPECT_EQ(s.fakes[0]->finished.load(), 0);
}

TEST(GatewayServing, ToolCallsAndReasoningAreParsed) {
  Stack s("<think>hmm</think>ok<tool_call>get_weather {\"city\":\"Paris\"}</tool_call>");
  json j = json::parse(
      s.Unary(kChat + R"(,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]})")
          .body);
  auto& m = j["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "hmm");
  EXPECT_EQ(m["content"], "ok");
  ASSERT_EQ(m["tool_calls"].size(), 1u);
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Paris\"}");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
}

TEST(GatewayServing, WorkerDownIs503) {
  Stack s("x");
  s.fakes[0]->fail_before_first_token = true;
  HttpReply r = s.Unary(kChat + "}");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(json::parse(r.body)["error"]["type"], "server_error");
}

// No worker can take a streaming request: the caller gets the error to answer with its HTTP
// status (503 + Retry-After), and nothing was written (not a 200 stream with an error in it).
TEST(GatewayServing, StreamThatCannotStartIsAnErrorNotAStream) {
  Stack s("x");
  s.fakes[0]->fail_before_first_token = true;
  TestClient io;
  int status = 0;
  std::optional<ApiError> unsent;
  s.Stream(kChat + R"(,"stream":true})", true, &io, &status, &unsent);
  EXPECT_EQ(status, 503);
  ASSERT_TRUE(unsent.has_value());
  EXPECT_EQ(unsent->http_status, 503);
  EXPECT_GT(unsent->retry_after_s, 0);
  EXPECT_TRUE(io.written.empty()) << io.written;
}

// A slow step (here 300 ms per token) gets SSE comments every keep-alive interval.
TEST(GatewayServing, StalledStreamsGetKeepAliveComments) {
  Stack s("ab", /*step_ms=*/300, 1, {}, std::chrono::milliseconds(50));
  TestClient io;
  auto events = s.Stream(kChat + R"(,"stream":true})", true, &io);
  size_t comments = 0;
  for (size_t p = io.written.find(": keep-alive\n\n"); p != std::string::npos;
       p = io.written.find(": keep-alive\n\n", p + 1)) {
    ++comments;
  }
  EXPECT_GE(comments, 6u) << io.written;  // ~900 ms of steps / 50 ms, minus scheduling noise
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back(), "[DONE]");
}

}  // namespace
}  // namespace moe::gateway
