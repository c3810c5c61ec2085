// The gateway's HTTP server over a scripted fake worker on 127.0.0.1:0, for tests of the
// HTTP layer (http_test.cc, http_hostile_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "services/gateway/byte_codec.h"
#include "services/gateway/http_server.h"
#include "tests/gateway/fake_worker.h"
#include "tests/gateway/http_client.h"

namespace moe::gateway::testing {

struct TestGateway {
  TestGateway(std::string script, int step_ms, AdmissionConfig ac, std::vector<std::string> keys = {},
         size_t max_body = 1 << 16, std::function<void(HttpTransportConfig*)> tune = nullptr,
              std::function<void(ServingConfig*)> tune_serving = nullptr,
              std::function<void(HttpConfig*)> tune_http = nullptr)
      : admission(ac) {
    fake = std::make_shared<FakeWorker>("w0", script, step_ms);
    placer = std::make_unique<SequencePlacer>(std::vector<std::shared_ptr<Worker>>{fake}, SequencePlacerConfig{});
    ServingConfig sc;
    sc.model_name = "m";
    sc.max_context = 1024;
    if (tune_serving) tune_serving(&sc);
    serving = std::make_unique<OpenAIServing>(sc, &codec, placer.get(), &admission, &metrics);
    api_keys = *ApiKeys::Load(keys, "");
    HttpConfig hc;
    hc.transport.listen = "127.0.0.1:0";
    hc.transport.limits.max_body_bytes = max_body;
    hc.transport.handler_threads = 16;
    if (tune) tune(&hc.transport);
    if (tune_http) tune_http(&hc);
    http = std::make_unique<GatewayHttpServer>(hc, serving.get(), &api_keys, &admission, placer.get(), &metrics);
    auto p = http->Bind();
    EXPECT_TRUE(p.ok()) << p.status();
    port = *p;
    th = std::thread([this] { (void)http->Serve(); });
  }
  ~TestGateway() {
    http->Stop();
    th.join();
  }
  HttpResult Post(const std::string& path, const std::string& body, testing::Headers h = {}) {
    return testing::Request(port, "POST", path, body, h);
  }
  HttpResult Get(const std::string& path, testing::Headers h = {}) { return testing::Request(port, "GET", path, "", h); }
  ByteCodec codec;
  Metrics metrics{"m"};
  AdmissionController admission;
  std::shared_ptr<FakeWorker> fake;
  std::unique_ptr<SequencePlacer> placer;
  std::unique_ptr<OpenAIServing> serving;
  ApiKeys api_keys;
  std::unique_ptr<GatewayHttpServer> http;
  int port = 0;
  std::thread th;
};

inline void ExpectError(const HttpResult& r, int status, const std::string& code) {
  ASSERT_NE(r.status, 0) << "no response";
  EXPECT_EQ(r.status, status) << r.body;
  nlohmann::json j = nlohmann::json::parse(r.body, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.body;
  ASSERT_TRUE(j.contains("error")) << r.body;
  for (const char* k : {"message", "type", "param", "code"}) EXPECT_TRUE(j["error"].contains(k)) << k;
  if (!code.empty()) {
    EXPECT_EQ(j["error"]["code"], code) << r.body;
  }
}


}  // namespace moe::gateway::testing
