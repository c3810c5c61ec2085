#include "services/gateway/admission.h"

#include <gtest/gtest.h>

#include <fstream>
#include <thread>

namespace moe::gateway {
namespace {

using Ticket = std::unique_ptr<AdmissionController::Ticket>;

Ticket Take(std::variant<Ticket, ApiError> v) {
  EXPECT_TRUE(std::holds_alternative<Ticket>(v));
  return std::holds_alternative<Ticket>(v) ? std::move(std::get<Ticket>(v)) : nullptr;
}

TEST(GatewayAdmission, BoundedQueueAnswers503WithRetryAfter) {
  AdmissionController a({/*max_running=*/2, /*max_queued=*/1, /*per_key_limit=*/0, /*retry_after_s=*/3});
  Ticket t1 = Take(a.Admit(""));
  Ticket t2 = Take(a.Admit(""));
  Ticket t3 = Take(a.Admit(""));
  EXPECT_TRUE(t1->running());
  EXPECT_TRUE(t2->running());
  EXPECT_FALSE(t3->running());
  EXPECT_EQ(a.running(), 2);
  EXPECT_EQ(a.queued(), 1);
  auto full = a.Admit("");
  ASSERT_TRUE(std::holds_alternative<ApiError>(full));
  EXPECT_EQ(std::get<ApiError>(full).http_status, 503);
  EXPECT_EQ(std::get<ApiError>(full).retry_after_s, 3);
  EXPECT_EQ(std::get<ApiError>(full).ToJson()["error"]["code"], "server_overloaded");
  t1.reset();  // frees a slot: the queued one runs
  EXPECT_TRUE(t3->running());
  EXPECT_EQ(a.queued(), 0);
  Ticket t4 = Take(a.Admit(""));
  EXPECT_FALSE(t4->running());
}

TEST(GatewayAdmission, PerKeyLimitAnswers429) {
  AdmissionController a({8, 8, /*per_key_limit=*/2, 1});
  Ticket a1 = Take(a.Admit("k1"));
  Ticket a2 = Take(a.Admit("k1"));
  auto over = a.Admit("k1");
  ASSERT_TRUE(std::holds_alternative<ApiError>(over));
  EXPECT_EQ(std::get<ApiError>(over).http_status, 429);
  EXPECT_EQ(std::get<ApiError>(over).type, "rate_limit_error");
  Ticket b1 = Take(a.Admit("k2"));  // other keys are not affected
  a1.reset();
  Ticket a3 = Take(a.Admit("k1"));
  EXPECT_TRUE(a3 != nullptr);
}

TEST(GatewayAdmission, WaitRunningBlocksInFifoOrderAndAborts) {
  AdmissionController a({1, 4, 0, 1});
  Ticket t1 = Take(a.Admit(""));
  Ticket t2 = Take(a.Admit(""));
  Ticket t3 = Take(a.Admit(""));
  bool aborted = !t3->WaitRunning([] { return true; }, std::chrono::milliseconds(1));
  EXPECT_TRUE(aborted);
  std::atomic<bool> got{false};
  std::thread th([&] {
    got = t2->WaitRunning([] { return false; }, std::chrono::milliseconds(1));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(got.load());
  t1.reset();
  th.join();
  EXPECT_TRUE(got.load());
  EXPECT_FALSE(t3->running());  // t2 was first in line
  t3.reset();
  EXPECT_EQ(a.queued(), 0);
}

TEST(GatewayApiKeys, OpenWhenNoneConfigured) {
  ApiKeys k;
  auto r = k.Check("");
  EXPECT_TRUE(std::holds_alternative<std::string>(r));
}

TEST(GatewayApiKeys, MissingMalformedWrongAre401) {
  std::string path = std::string(MOE_BINARY_DIR) + "/gateway_keys_test.txt";
  {
    std::ofstream f(path);
    f << "# keys\nsk-file\n\n";
  }
  auto keys = ApiKeys::Load({"sk-flag"}, path);
  ASSERT_TRUE(keys.ok()) << keys.status();
  for (const char* bad : {"", "Basic abc", "Bearer nope", "Bearer "}) {
    auto r = keys->Check(bad);
    ASSERT_TRUE(std::holds_alternative<ApiError>(r)) << bad;
    EXPECT_EQ(std::get<ApiError>(r).http_status, 401);
    EXPECT_EQ(std::get<ApiError>(r).type, "authentication_error");
  }
  EXPECT_EQ(std::get<std::string>(keys->Check("Bearer sk-file")), "sk-file");
  EXPECT_EQ(std::get<std::string>(keys->Check("Bearer sk-flag")), "sk-flag");
  EXPECT_FALSE(ApiKeys::Load({}, path + ".missing").ok());
}

}  // namespace
}  // namespace moe::gateway
