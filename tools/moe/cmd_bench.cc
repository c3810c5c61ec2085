// moe bench <what> [flags]: dispatcher over the benchmark programs (bench.h).
#include <cstdio>
#include <cstring>

#include "tools/moe/bench.h"
#include "tools/moe/commands.h"

namespace moe::cli {
namespace {
// One row per line, sorted by name (this file merges with git's union driver).
const Bench kBenches[] = {
    {"cache", "replay a routing trace: LRU vs our policy vs Belady (expertd)", BenchCache},
    {"convert", "moe convert MB/s vs. raw O_DIRECT read MB/s of the same input", RunBenchConvert},
    {"io", "expert miss path vs raw O_DIRECT reads, io_uring vs pread (expertd)", BenchIo},
    {"kernels", "quantized matmul GB/s, GFLOP/s and ratio to measured memory bandwidth", RunBenchKernels},
    {"lease", "cost of leasing a cached expert from shared memory (expertd)", BenchLease},
    {"tokenize", "encode MB/s of the tokenizer vs Hugging Face tokenizers on the same corpus", RunBenchTokenize},
};

void Usage(FILE* out) {
  std::fprintf(out, "usage: moe bench <what> [flags]   (moe bench <what> --help)\n\nbenchmarks:\n");
  for (const auto& b : kBenches) std::fprintf(out, "  %-9s %s\n", b.name, b.summary);
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
