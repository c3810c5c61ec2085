#include "common/base/flags.h"

#include <gtest/gtest.h>

namespace moe {
namespace {

TEST(ByteSize, Units) {
  EXPECT_EQ(*ParseByteSize("123"), 123u);
  EXPECT_EQ(*ParseByteSize("4K"), 4096u);
  EXPECT_EQ(*ParseByteSize("512M"), 512ull << 20);
  EXPECT_EQ(*ParseByteSize("1.5G"), 3ull << 29);
  EXPECT_EQ(*ParseByteSize("2GiB"), 2ull << 30);
  EXPECT_FALSE(ParseByteSize("").ok());
  EXPECT_FALSE(ParseByteSize("abc").ok());
  EXPECT_FALSE(ParseByteSize("-1G").ok());
}

TEST(FlagSet, ParsesAllForms) {
  std::string model = "default";
  int64_t n = 32;
  double t = 1.0;
  bool json = false, greedy = true;
  uint64_t budget = 0;
  std::vector<std::string> list;
  FlagSet f("run", "test");
  f.AddString("model", &model, "m");
  f.AddInt("max-tokens", &n, "n");
  f.AddDouble("temperature", &t, "t");
  f.AddBool("json", &json, "j");
  f.AddBool("greedy", &greedy, "g");
  f.AddBytes("budget", &budget, "b");
  f.AddStringList("x", &list, "x");
  ASSERT_TRUE(f.Parse({"run", "--model", "dir", "--max-tokens=7", "--temperature", "0.5", "--json",
                       "--no-greedy", "--budget=1G", "--x=a", "--x", "b", "pos1", "--", "--pos2"})
                  .ok());
  EXPECT_EQ(model, "dir");
  EXPECT_EQ(n, 7);
  EXPECT_DOUBLE_EQ(t, 0.5);
  EXPECT_TRUE(json);
  EXPECT_FALSE(greedy);
  EXPECT_EQ(budget, 1ull << 30);
  EXPECT_EQ(list, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(f.positional(), (std::vector<std::string>{"pos1", "--pos2"}));
  EXPECT_TRUE(f.WasSet("model"));
  EXPECT_FALSE(f.WasSet("nonexistent"));
}

TEST(FlagSet, ErrorsNameTheFlag) {
  int64_t n = 0;
  FlagSet f("run", "test");
  f.AddInt("max-tokens", &n, "n");
  auto s = f.Parse({"run", "--max-tokens=abc"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("max-tokens"), std::string::npos);
  FlagSet g("run", "test");
  s = g.Parse({"run", "--bogus"});
  EXPECT_NE(s.message().find("bogus"), std::string::npos);
  FlagSet h("run", "test");
  h.AddInt("max-tokens", &n, "n");
  s = h.Parse({"run", "--max-tokens"});
  EXPECT_NE(s.message().find("needs a value"), std::string::npos);
}

TEST(FlagSet, Help) {
  FlagSet f("run", "Generate.");
  int64_t n = 3;
  f.AddInt("max-tokens", &n, "tokens");
  ASSERT_TRUE(f.Parse({"run", "--help"}).ok());
  EXPECT_TRUE(f.help_requested());
  EXPECT_NE(f.Usage().find("--max-tokens"), std::string::npos);
}

}  // namespace
}  // namespace moe
