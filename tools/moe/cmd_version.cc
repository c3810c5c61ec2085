#include <cstdio>
#include <string>

#include "common/base/flags.h"
#include "common/kernels/kernels.h"
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
  std::printf("kernels:");
  for (auto isa : {kernels::Isa::kScalar, kernels::Isa::kAvx2, kernels::Isa::kAvx512})
    if (kernels::IsaSupported(isa)) std::printf(" %s", std::string(kernels::IsaName(isa)).c_str());
  std::printf(" (default %s)\n", std::string(kernels::IsaName(kernels::BestIsa())).c_str());
  return 0;
}

}  // namespace moe::cli
