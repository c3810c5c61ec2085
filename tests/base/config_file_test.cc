#include "common/base/config_file.h"

#include <gtest/gtest.h>

namespace moe {
namespace {

TEST(ConfigFile, SectionLinesBecomeFlagsBeforeTheCommandLine) {
  auto args = ParseConfigSection("# c\nlog = info\n[gateway]\nlisten = 127.0.0.1:9\nworker = a\nworker=b\n"
                                 "[inferd]\nmodel = /m\n",
                                 "gateway", "t.conf");
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(*args, (std::vector<std::string>{"--log=info", "--listen=127.0.0.1:9", "--worker=a", "--worker=b"}));
  auto inferd = ParseConfigSection("[inferd]\nmodel = /m\n", "inferd", "t.conf");
  EXPECT_EQ(*inferd, (std::vector<std::string>{"--model=/m"}));
}

TEST(ConfigFile, MalformedLinesNameFileAndLine) {
  auto bad = ParseConfigSection("[gateway]\nno equals sign\n", "gateway", "x.conf");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("x.conf:2"), std::string::npos);
  EXPECT_FALSE(ParseConfigSection("[gateway\n", "gateway", "x.conf").ok());
  EXPECT_FALSE(ParseConfigSection("= v\n", "gateway", "x.conf").ok());
  EXPECT_FALSE(ReadConfigSection("/nonexistent/moe.conf", "gateway").ok());
}

TEST(ConfigFile, ArgsWithConfigDropsTheConfigFlag) {
  char a0[] = "gateway", a1[] = "--listen=x:1", a2[] = "--config", a3[] = "/nonexistent.conf";
  char* argv[] = {a0, a1, a2, a3};
  EXPECT_FALSE(ArgsWithConfig(4, argv, "gateway").ok());  // file missing -> error, not ignored
  auto plain = ArgsWithConfig(2, argv, "gateway");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(*plain, (std::vector<std::string>{"gateway", "--listen=x:1"}));
}

}  // namespace
}  // namespace moe
