#include "services/gateway/sse.h"

#include <gtest/gtest.h>

#include "services/gateway/text_codec.h"

namespace moe::gateway {
namespace {

TEST(GatewaySse, FramesOneLinePerEventAndDone) {
  nlohmann::json j{{"content", "line1\nline2"}};
  std::string f = SseData(j);
  EXPECT_EQ(f.rfind("data: ", 0), 0u);
  EXPECT_EQ(f.substr(f.size() - 2), "\n\n");
  EXPECT_EQ(f.find('\n'), f.size() - 2);  // the newline inside is escaped
  EXPECT_EQ(SseDone(), "data: [DONE]\n\n");
  EXPECT_EQ(SseComment("a\nb"), ": a b\n\n");
}

TEST(GatewaySse, ParseRoundTripAcrossArbitraryReadBoundaries) {
  std::string wire = SseComment("ping") + SseData({{"a", 1}}) + SseData({{"b", "x y"}}) + SseDone();
  for (size_t chunk = 1; chunk <= wire.size(); ++chunk) {
    std::string buf;
    std::vector<std::string> got;
    for (size_t i = 0; i < wire.size(); i += chunk) {
      buf += wire.substr(i, chunk);
      for (auto& d : SseParse(&buf)) got.push_back(d);
    }
    ASSERT_EQ(got.size(), 3u) << chunk;
    EXPECT_EQ(nlohmann::json::parse(got[0])["a"], 1);
    EXPECT_EQ(nlohmann::json::parse(got[1])["b"], "x y");
    EXPECT_EQ(got[2], "[DONE]");
    EXPECT_TRUE(buf.empty());
  }
}

TEST(GatewayUtf8Assembler, HoldsIncompleteSequences) {
  Utf8Assembler a;
  std::string euro = "\xE2\x82\xAC";
  EXPECT_EQ(a.Push("x" + euro.substr(0, 1)), "x");
  EXPECT_EQ(a.Push(euro.substr(1, 1)), "");
  EXPECT_EQ(a.Push(euro.substr(2, 1) + "y"), euro + "y");
  EXPECT_EQ(a.Push("\xF0\x9F"), "");
  EXPECT_EQ(a.Flush(), "\xF0\x9F");
}

}  // namespace
}  // namespace moe::gateway
