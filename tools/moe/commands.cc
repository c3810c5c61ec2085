#include "tools/moe/commands.h"

#include <cstdio>

namespace moe::cli {

int RunRun(int argc, char** argv);
int RunScore(int argc, char** argv);
int RunVersion(int argc, char** argv);
// Declarations of the subcommands implemented in cmd_*.cc (keep sorted).

namespace {
const Command kCommands[] = {
    {"run", "generate tokens from a model directory (--model, --prompt-ids, --max-tokens, ...)", RunRun},
    {"score", "teacher-forced argmax and log-probabilities of --ids", RunScore},
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
