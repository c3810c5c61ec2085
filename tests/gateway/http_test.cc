// The HTTP layer against fake workers: raw malformed input, status codes,
// headers, SSE over a real socket, and cancellation on disconnect. All
// traffic is on 127.0.0.1.
#include "services/gateway/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "tests/gateway/http_fixture.h"

namespace moe::gateway {
namespace {

using json = nlohmann::json;
using testing::ExpectError;
using testing::HttpResult;
using Server = testing::TestGateway;

const std::string kChat = R"({"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":0)";

TEST(GatewayHttp, ChatRoundTripModelsHealthMetrics) {
  Server s("hello", 1, {});
  auto r = s.Post("/v1/chat/completions", kChat + "}");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["choices"][0]["message"]["content"], "hello");
  auto m = s.Get("/v1/models");
  EXPECT_EQ(json::parse(m.body)["data"][0]["id"], "m");
  auto h = s.Get("/health");
  EXPECT_EQ(h.status, 200);
  auto met = s.Get("/metrics");
  for (const char* name : {"moe_time_to_first_token_seconds_bucket", "moe_inter_token_latency_seconds_bucket",
                           "moe_queue_depth", "moe_worker_active_sequences", "moe_worker_tokens_per_second",
                           "moe_requests_total", "moe_worker_kv_cache_bytes", "moe_worker_prefix_cache_usage"}) {
    EXPECT_NE(met.body.find(name), std::string::npos) << name;
  }
  // Counters are counters, every series names the model, and the token/finish counters count.
  for (const char* type : {"# TYPE moe_worker_tokens_total counter", "# TYPE moe_worker_steps_total counter",
                           "# TYPE moe_prompt_tokens_total counter", "# TYPE moe_generated_tokens_total counter",
                           "# TYPE moe_request_finish_total counter"}) {
    EXPECT_NE(met.body.find(type), std::string::npos) << type;
  }
  EXPECT_NE(met.body.find("moe_request_finish_total{model=\"m\",reason=\"stop\"} 1"), std::string::npos) << met.body;
  EXPECT_NE(met.body.find("moe_generated_tokens_total{model=\"m\"} 6"), std::string::npos);  // "hello" + EOS
  EXPECT_NE(met.body.find("moe_prompt_tokens_total{model=\"m\"} "), std::string::npos);
  for (size_t p = met.body.find("\nmoe_"); p != std::string::npos; p = met.body.find("\nmoe_", p + 1)) {
    const std::string line = met.body.substr(p + 1, met.body.find('\n', p + 1) - p - 1);
    EXPECT_NE(line.find("model=\"m\""), std::string::npos) << line;
  }
  // A second scrape does not count the worker's totals twice.
  auto again = s.Get("/metrics");
  auto worker_tokens = [](const std::string& body) {
    size_t p = body.find("\nmoe_worker_tokens_total{");
    return p == std::string::npos ? std::string() : body.substr(p, body.find('\n', p + 1) - p);
  };
  EXPECT_EQ(worker_tokens(again.body), worker_tokens(met.body));
  EXPECT_NE(worker_tokens(met.body).find("} 6"), std::string::npos) << worker_tokens(met.body);
}

TEST(GatewayHttp, MalformedInputGetsShapedErrors) {
  Server s("x", 1, {}, {}, /*max_body=*/4096);
  ExpectError(s.Post("/v1/chat/completions", "{\"model\": "), 400, "invalid_json");
  ExpectError(s.Post("/v1/chat/completions", ""), 400, "invalid_json");
  ExpectError(s.Post("/v1/chat/completions", "\xff\xfe"), 400, "invalid_json");
  ExpectError(s.Post("/v1/completions", R"({"model":"m","prompt":"a","n":0})"), 400, "invalid_value");
  ExpectError(s.Post("/v1/completions", R"({"model":"zz","prompt":"a"})"), 404, "model_not_found");
  ExpectError(s.Post("/v1/chat/completions", std::string(8000, ' ')), 413, "body_too_large");
  ExpectError(s.Get("/v2/nothing"), 404, "unknown_url");
  ExpectError(s.Get("/v1/chat/completions"), 405, "method_not_allowed");
  ExpectError(s.Post("/v1/chat/completions", kChat + R"(,"response_format":{"type":"json_schema","json_schema":{"schema":{"type":"object","not":{}}}}})"), 400,
              "invalid_value");
  // The server is still healthy afterwards.
  auto r = s.Post("/v1/chat/completions", kChat + "}");
  EXPECT_EQ(r.status, 200);
}

TEST(GatewayHttp, ApiKeysGive401) {
  Server s("x", 1, {}, {"sk-1"});
  ExpectError(s.Post("/v1/chat/completions", kChat + "}"), 401, "invalid_api_key");
  ExpectError(s.Get("/v1/models"), 401, "invalid_api_key");
  ExpectError(s.Post("/v1/chat/completions", kChat + "}", {{"Authorization", "Bearer sk-2"}}), 401, "invalid_api_key");
  auto r = s.Post("/v1/chat/completions", kChat + "}", {{"Authorization", "Bearer sk-1"}});
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(s.Get("/health").status, 200);  // health stays open
}

TEST(GatewayHttp, FullQueueIs503WithRetryAfterAndKeyLimitIs429) {
  Server s(std::string(400, 'z'), 5, {/*max_running=*/1, /*max_queued=*/0, /*per_key_limit=*/1, 2}, {"k1", "k2"});
  testing::Headers k1{{"Authorization", "Bearer k1"}}, k2{{"Authorization", "Bearer k2"}};
  std::thread slow([&] { s.Post("/v1/chat/completions", kChat + R"(,"max_tokens":100})", k1); });
  for (int i = 0; i < 200 && s.admission.running() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(s.admission.running(), 1);
  auto r429 = s.Post("/v1/chat/completions", kChat + "}", k1);
  ExpectError(r429, 429, "concurrency_limit_exceeded");
  auto r503 = s.Post("/v1/chat/completions", kChat + "}", k2);
  ExpectError(r503, 503, "server_overloaded");
  EXPECT_EQ(r503.Header("retry-after"), "2");
  slow.join();
}

// Raw socket client: sends one streaming request, reads until it has seen
// `events` SSE data lines, returns the bytes read; keeps the socket open.
int OpenStream(int port, const std::string& body, int events, std::string* got) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return -1;
  std::string req = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    "Content-Length: " +
                    std::to_string(body.size()) + "\r\n\r\n" + body;
  ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  char buf[4096];
  size_t seen = 0;
  while (true) {
    size_t count = 0;
    for (size_t p = got->find("data: "); p != std::string::npos; p = got->find("data: ", p + 1)) ++count;
    if (static_cast<int>(count) >= events || got->find("[DONE]") != std::string::npos) break;
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got->append(buf, n);
    seen += n;
  }
  return fd;
}

// Invalid UTF-8 in the method or path reached the error handler's strict JSON dump, which
// threw outside httplib's try: std::terminate, the whole gateway gone.
// This test was flaky under load while the gateway ran on httplib: after a request line it
// could not parse, httplib answered 400 but kept reading, so the header lines that followed
// were answered as requests of their own, and whether those answers arrived before the test
// stopped reading depended on timing. Now a bad request line is answered once and the
// connection closed; the test reads to the close and requires exactly one answer.
TEST(GatewayHttp, InvalidUtf8InTheRequestLineGetsAJsonError) {
  Server s("x", 1, {});
  for (const std::string line : {"GET /%FF HTTP/1.1", "GET /%C0%AF HTTP/1.1", "GET /\xff\xfe HTTP/1.1",
                                 "\xff\xfe / HTTP/1.1", "POST /v1/chat/completions%FF HTTP/1.1"}) {
    auto ex = testing::RawExchange(s.port, line + "\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                                   /*want=*/2, /*timeout_ms=*/30000);
    EXPECT_TRUE(ex.closed) << line;
    EXPECT_TRUE(ex.rest.empty()) << line << ": " << ex.rest;
    ASSERT_EQ(ex.responses.size(), 1u) << line;
    auto j = json::parse(ex.responses[0].body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << ex.responses[0].body;
    EXPECT_TRUE(j.contains("error")) << ex.responses[0].body;
  }
  EXPECT_EQ(s.Get("/health").status, 200);  // still serving
}

TEST(GatewayHttp, StreamingOverTheWireEndsWithDone) {
  Server s("abcdef", 1, {});
  std::string got;
  int fd = OpenStream(s.port, kChat + R"(,"stream":true})", 1000, &got);
  ASSERT_GE(fd, 0);
  ::close(fd);
  EXPECT_NE(got.find("Content-Type: text/event-stream"), std::string::npos);
  EXPECT_NE(got.find("data: [DONE]"), std::string::npos);
}

TEST(GatewayHttp, DisconnectCancelsWithinAStep) {
  const int step_ms = 20;
  Server s(std::string(2000, 'z'), step_ms, {});
  std::string got;
  int fd = OpenStream(s.port, kChat + R"(,"stream":true,"max_tokens":900})", 3, &got);
  ASSERT_GE(fd, 0);
  ::close(fd);
  int at_close = s.fake->tokens_emitted.load();
  for (int i = 0; i < 500 && s.fake->cancels.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_EQ(s.fake->cancels.load(), 1);
  int steps_after = s.fake->tokens_emitted.load() - at_close;
  // Poll period 10 ms < one 20 ms step: the worker sees the cancel at its next step.
  EXPECT_LE(steps_after, 1) << "tokens generated after the client left";
  EXPECT_EQ(s.fake->finished.load(), 0);
}

TEST(GatewayHttp, DisconnectCancelsANonStreamingRequestToo) {
  Server s(std::string(2000, 'z'), 20, {});
  std::string got;
  int fd = OpenStream(s.port, kChat + R"(,"max_tokens":900})", 0, &got);
  ASSERT_GE(fd, 0);
  for (int i = 0; i < 500 && s.fake->started.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ::close(fd);
  for (int i = 0; i < 500 && s.fake->cancels.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(s.fake->cancels.load(), 1);
  EXPECT_EQ(s.fake->finished.load(), 0);
}

// CORS is opt-in (--allowed-origins): preflights answered for allowed origins, refused by
// name for others, and every response to an allowed origin carries Allow-Origin.
TEST(GatewayHttp, CorsPreflightAndHeaders) {
  Server s("ok", 1, {}, {}, 1 << 16, nullptr, nullptr,
           [](HttpConfig* h) { h->allowed_origins = {"https://app.example"}; });
  auto pre = testing::Request(s.port, "OPTIONS", "/v1/chat/completions", "",
                              {{"Origin", "https://app.example"}, {"Access-Control-Request-Method", "POST"}});
  EXPECT_EQ(pre.status, 204);
  EXPECT_EQ(pre.Header("access-control-allow-origin"), "https://app.example");
  EXPECT_NE(pre.Header("access-control-allow-methods").find("POST"), std::string::npos);
  EXPECT_NE(pre.Header("access-control-allow-headers").find("Authorization"), std::string::npos);
  auto bad = testing::Request(s.port, "OPTIONS", "/v1/chat/completions", "", {{"Origin", "https://evil.example"}});
  ExpectError(bad, 403, "origin_not_allowed");
  EXPECT_EQ(bad.Header("access-control-allow-origin"), "");
  auto r = s.Post("/v1/chat/completions", kChat + "}", {{"Origin", "https://app.example"}});
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.Header("access-control-allow-origin"), "https://app.example");
  EXPECT_EQ(r.Header("vary"), "Origin");
  // Off by default: no CORS headers at all.
  Server plain("ok", 1, {});
  auto p2 = plain.Post("/v1/chat/completions", kChat + "}", {{"Origin", "https://app.example"}});
  EXPECT_EQ(p2.status, 200);
  EXPECT_EQ(p2.Header("access-control-allow-origin"), "");
}

TEST(GatewayHttp, XApiKeyWorksLikeBearer) {
  Server s("x", 1, {}, {"sk-1"});
  EXPECT_EQ(s.Post("/v1/chat/completions", kChat + "}", {{"x-api-key", "sk-1"}}).status, 200);
  ExpectError(s.Post("/v1/chat/completions", kChat + "}", {{"x-api-key", "sk-2"}}), 401, "invalid_api_key");
  ExpectError(s.Post("/v1/chat/completions", kChat + "}", {{"x-api-key", "sk-1"}, {"Authorization", "Bearer sk-9"}}),
              401, "invalid_api_key");
}

TEST(GatewayHttp, GenerationDeadlineEndsTheRequestWithA504) {
  Server s(std::string(500, 'z'), 20, {}, {}, 1 << 16, nullptr,
           [](ServingConfig* c) { c->generation_timeout = std::chrono::milliseconds(300); });
  auto t0 = std::chrono::steady_clock::now();
  ExpectError(s.Post("/v1/chat/completions", kChat + R"(,"max_tokens":400})"), 504, "generation_timeout");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  std::string got;
  int fd = OpenStream(s.port, kChat + R"(,"stream":true,"max_tokens":400})", 1000, &got);
  ::close(fd);
  EXPECT_NE(got.find("generation_timeout"), std::string::npos) << got;
  EXPECT_NE(got.find("data: [DONE]"), std::string::npos);
  EXPECT_GE(s.fake->cancels.load(), 2);  // the sequences were stopped on the worker
}

// SIGTERM drain: admitted requests finish, new ones get 503, a stream still running at the
// end gets an error event and [DONE].
TEST(GatewayHttp, DrainFinishesAdmittedRefusesNewAndEndsTheRest) {
  Server s(std::string(2000, 'z'), 10, {});
  std::string quick_body, long_got;
  std::thread quick([&] { quick_body = s.Post("/v1/chat/completions", kChat + R"(,"max_tokens":20})").body; });
  std::thread slow([&] {
    int fd = OpenStream(s.port, kChat + R"(,"stream":true,"max_tokens":900})", 100000, &long_got);
    ::close(fd);
  });
  for (int i = 0; i < 500 && s.admission.running() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(s.admission.running(), 2);
  std::thread drain([&] { s.http->Drain(std::chrono::milliseconds(800)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto refused = s.Post("/v1/chat/completions", kChat + "}");
  ExpectError(refused, 503, "worker_unavailable");
  EXPECT_EQ(refused.Header("retry-after"), "1");
  quick.join();
  slow.join();
  drain.join();
  EXPECT_EQ(json::parse(quick_body)["choices"][0]["finish_reason"], "length") << quick_body;
  EXPECT_NE(long_got.find("shutting down"), std::string::npos) << long_got.substr(long_got.size() - 300);
  EXPECT_NE(long_got.find("data: [DONE]"), std::string::npos);
}

TEST(GatewayHttp, AccessLogHasOneJsonLinePerRequest) {
  const std::string path = ::testing::TempDir() + "/access_" + std::to_string(::getpid()) + ".log";
  ::unlink(path.c_str());
  auto log = AccessLog::Open(path);
  ASSERT_TRUE(log.ok());
  {
    Server s("hi", 1, {}, {}, 1 << 16, nullptr, nullptr, [&](HttpConfig* h) { h->access_log = log->get(); });
    s.Post("/v1/chat/completions", kChat + "}");
    s.Get("/health");
    s.Get("/nope");
  }
  std::ifstream in(path);
  std::vector<json> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(json::parse(l));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["route"], "/v1/chat/completions");
  EXPECT_EQ(lines[0]["status"], 200);
  EXPECT_EQ(lines[0]["completion_tokens"], 3);  // "hi" + EOS
  EXPECT_GT(lines[0]["prompt_tokens"].get<int>(), 0);
  EXPECT_TRUE(lines[0]["ttft_ms"].is_number());
  EXPECT_TRUE(lines[0]["id"].get<std::string>().rfind("chatcmpl-", 0) == 0);
  EXPECT_EQ(lines[0]["client"], "127.0.0.1");
  EXPECT_EQ(lines[1]["status"], 200);
  EXPECT_EQ(lines[2]["status"], 404);
  for (const auto& l : lines) EXPECT_TRUE(l["latency_ms"].is_number());
  ::unlink(path.c_str());
}

}  // namespace
}  // namespace moe::gateway
