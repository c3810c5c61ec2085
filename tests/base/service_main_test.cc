#include "common/base/service_main.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "common/base/log.h"

namespace moe {
namespace {

struct Argv {
  explicit Argv(std::vector<std::string> a) : args(std::move(a)) {
    for (auto& s : args) ptrs.push_back(s.data());
  }
  int argc() { return static_cast<int>(ptrs.size()); }
  char** argv() { return ptrs.data(); }
  std::vector<std::string> args;
  std::vector<char*> ptrs;
};

TEST(ServiceMain, ConfigSectionThenCommandLine) {
  const std::string path = ::testing::TempDir() + "/svc_" + std::to_string(getpid()) + ".conf";
  std::ofstream(path) << "[svc]\nname = from-file\ncount = 3\nlog-level = warning\n[other]\nname = no\n";
  std::string name;
  int64_t count = 0;
  FlagSet flags("svc", "test service");
  flags.AddString("name", &name, "n");
  flags.AddInt("count", &count, "c");
  Argv a({"svc", "--config", path, "--count=5"});
  EXPECT_EQ(ParseServiceFlags("svc", flags, a.argc(), a.argv()), std::nullopt);
  EXPECT_EQ(name, "from-file");
  EXPECT_EQ(count, 5);  // the command line wins over the file
  EXPECT_EQ(GetLogLevel(), LogLevel::WARNING);
  SetLogLevel(LogLevel::INFO);
  std::remove(path.c_str());
}

TEST(ServiceMain, HelpAndBadFlagsGiveExitCodes) {
  FlagSet f1("svc", "t");
  Argv help({"svc", "--help"});
  EXPECT_EQ(ParseServiceFlags("svc", f1, help.argc(), help.argv()), 0);
  FlagSet f2("svc", "t");
  Argv bad({"svc", "--nonexistent=1"});
  EXPECT_EQ(ParseServiceFlags("svc", f2, bad.argc(), bad.argv()), 2);
  FlagSet f3("svc", "t");
  Argv lvl({"svc", "--log-level=loud"});
  EXPECT_EQ(ParseServiceFlags("svc", f3, lvl.argc(), lvl.argv()), 2);
  FlagSet f4("svc", "t");
  Argv missing({"svc", "--config", "/nonexistent/moestream.conf"});
  EXPECT_EQ(ParseServiceFlags("svc", f4, missing.argc(), missing.argv()), 2);
}

}  // namespace
}  // namespace moe
