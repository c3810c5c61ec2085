#include <cstdio>

#include "common/base/flags.h"
#include "tools/moe/commands.h"

namespace moe::cli {

int RunVersion(int argc, char** argv) {
  FlagSet flags("version", "Print the moestream version.");
  if (auto s = flags.Parse(argc, argv); !s.ok()) return Fail("version", s);
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  std::printf("moestream %s\n", MOE_VERSION);
  return 0;
}

}  // namespace moe::cli
