// moe inspect DIR [--json]: census of a container or an HF checkpoint.
#include <cstdio>
#include <string>

#include "common/base/flags.h"
#include "common/format/census.h"
#include "tools/moe/commands.h"

namespace moe::cli {

int RunInspect(int argc, char** argv) {
  bool json = false;
  FlagSet flags("inspect",
                "Census of a moestream container or a Hugging Face checkpoint: bytes per format "
                "and per role, tensors per layer. Usage: moe inspect DIR [--json]");
  flags.AddBool("json", &json, "print JSON");
  if (auto s = flags.Parse(argc, argv); !s.ok()) return Fail("inspect", s);
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (flags.positional().size() != 1) {
    return Fail("inspect", absl::InvalidArgumentError("expected exactly one directory"));
  }
  auto c = TakeCensus(flags.positional()[0]);
  if (!c.ok()) return Fail("inspect", c.status());
  const std::string text = json ? CensusJson(*c) + "\n" : CensusText(*c);
  std::fputs(text.c_str(), stdout);
  return 0;
}

}  // namespace moe::cli
