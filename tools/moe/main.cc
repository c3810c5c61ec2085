// moe: the moestream command-line tool. Dispatches to a subcommand.
#include <cstdio>
#include <cstring>

#include "tools/moe/commands.h"

namespace {
void PrintUsage(FILE* out) {
  std::fprintf(out, "usage: moe <command> [flags]   (moe <command> --help for its flags)\n\ncommands:\n");
  for (const auto* c = moe::cli::Commands(); c->name != nullptr; ++c) {
    std::fprintf(out, "  %-10s %s\n", c->name, c->summary);
  }
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    PrintUsage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const auto* c = moe::cli::Commands(); c->name != nullptr; ++c) {
    if (!std::strcmp(argv[1], c->name)) return c->run(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "moe: unknown command '%s'\n", argv[1]);
  PrintUsage(stderr);
  return 2;
}
