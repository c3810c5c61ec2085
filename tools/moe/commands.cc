#include "tools/moe/commands.h"

#include <cstdio>

namespace moe::cli {

int RunBench(int argc, char** argv);
int RunHeat(int argc, char** argv);
int RunVersion(int argc, char** argv);
// Declarations of the subcommands implemented in cmd_*.cc (keep sorted).

namespace {
const Command kCommands[] = {
    {"bench", "run a benchmark program (moe bench --help lists them)", RunBench},
    {"heat", "expertd admin: per-tier stats, expert heat map (--json, --png), pin/unpin, budget", RunHeat},
    {"version", "print the version and the kernel variants this CPU can run", RunVersion},
    {nullptr, nullptr, nullptr},
};
}  // namespace

const Command* Commands() { return kCommands; }

int Fail(const char* command, const absl::Status& status) {
  std::fprintf(stderr, "moe %s: %s\n", command, std::string(status.message()).c_str());
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace moe::cli
