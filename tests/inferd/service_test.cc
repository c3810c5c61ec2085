// inferd's gRPC service refuses what a bad client could send before it reaches the batcher:
// NaN or out-of-range sampling, unbounded logprobs or stop lists (the audit of issue 20).
#include "services/inferd/service.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/inferd/toy_model.h"

namespace moe::inferd {
namespace {

TEST(InferdService, RefusesNonFiniteOrUnboundedRequestsByName) {
  testing::ToyConfig tc;
  testing::ToyModel m(tc);
  Batcher b(&m, BatcherConfig{});
  InferdService svc(&b, &m);
  auto call = [&](auto tweak) {
    GenerateRequest req;
    req.set_request_id("r");
    req.add_prompt(1);
    req.set_max_tokens(2);
    tweak(&req);
    grpc::ServerContext ctx;
    return svc.Generate(&ctx, &req, nullptr);  // refused before anything is written
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (auto tweak : std::vector<std::function<void(GenerateRequest*)>>{
           [&](GenerateRequest* r) { r->mutable_sampling()->set_temperature(nan); },
           [&](GenerateRequest* r) { r->mutable_sampling()->set_top_p(nan); },
           [&](GenerateRequest* r) { r->mutable_sampling()->set_presence_penalty(std::numeric_limits<float>::infinity()); },
           [&](GenerateRequest* r) { r->mutable_sampling()->set_frequency_penalty(-std::numeric_limits<float>::infinity()); },
           [&](GenerateRequest* r) { r->mutable_sampling()->set_min_p(nan); },
           [&](GenerateRequest* r) { r->set_logprobs(1 << 20); },
           [&](GenerateRequest* r) {
             for (int i = 0; i < 5000; ++i) r->add_stop_token_ids(i);
           },
       }) {
    grpc::Status st = call(tweak);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_FALSE(st.error_message().empty());
  }
  b.Shutdown();
}

}  // namespace
}  // namespace moe::inferd
