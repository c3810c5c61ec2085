// Subcommands of the `moe` tool. Each lives in its own cmd_<name>.cc and
// parses its own flags with moe::FlagSet; add it to kCommands in commands.cc.
#pragma once

#include "absl/status/status.h"

namespace moe::cli {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);  // argv[0] is the subcommand name
};

// Returns the table of subcommands (null-terminated by name == nullptr).
const Command* Commands();

// Prints "moe <command>: <message>" to stderr and returns exit code 1 (or 2
// for usage errors). Shared so every subcommand reports errors alike.
int Fail(const char* command, const absl::Status& status);

}  // namespace moe::cli
