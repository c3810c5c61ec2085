// moe bench <what> [flags]: dispatcher over the benchmark programs.
#include <cstdio>
#include <cstring>

#include "tools/moe/bench.h"
#include "tools/moe/commands.h"

namespace moe::cli {
namespace {
// Keep sorted by name; add a row per bench_<what>.cc.
const Bench kBenches[] = {
    {"cache", "replay a routing trace: LRU vs our policy vs Belady (expertd)", BenchCache},
    {"io", "expert miss path vs raw O_DIRECT reads, io_uring vs pread (expertd)", BenchIo},
    {"lease", "cost of leasing a cached expert from shared memory (expertd)", BenchLease},
};

void Usage(FILE* out) {
  std::fprintf(out, "usage: moe bench <what> [flags]   (moe bench <what> --help)\n\nbenchmarks:\n");
  for (const auto& b : kBenches) std::fprintf(out, "  %-8s %s\n", b.name, b.summary);
}
}  // namespace

int RunBench(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    Usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const auto& b : kBenches) {
    if (!std::strcmp(argv[1], b.name)) return b.run(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "moe bench: unknown benchmark '%s'\n", argv[1]);
  Usage(stderr);
  return 2;
}

}  // namespace moe::cli
