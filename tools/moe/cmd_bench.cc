// `moe bench <what> [flags]`: dispatcher for the benchmark programs. Each
// target lives in its own cmd_bench_<what>.cc and is one row of kTargets
// (keep sorted by name). Benchmarks report ratios to floors measured
// in the same run (docs/BENCHMARKS.md).
#include <cstdio>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tools/moe/commands.h"

namespace moe::cli {

// Declarations of the targets implemented in cmd_bench_*.cc (keep sorted).
int RunBenchBatch(int argc, char** argv);
int RunBenchCache(int argc, char** argv);
int RunBenchConvert(int argc, char** argv);
int RunBenchDense(int argc, char** argv);
int RunBenchE2e(int argc, char** argv);
int RunBenchIo(int argc, char** argv);
int RunBenchKernels(int argc, char** argv);
int RunBenchLease(int argc, char** argv);
int RunBenchPrefill(int argc, char** argv);
int RunBenchSpec(int argc, char** argv);
int RunBenchStructured(int argc, char** argv);
int RunBenchTokenize(int argc, char** argv);
int RunBenchChat(int argc, char** argv);

namespace {
struct BenchTarget {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);  // argv[0] is the target name
};
const BenchTarget kTargets[] = {
    {"batch", "engine: one fused decode step for S sequences vs S separate forwards", RunBenchBatch},
    {"cache", "expertd policy: LRU vs ours vs Belady hit rates on a routing trace", RunBenchCache},
    {"chat", "chat-template render cost: the C++ engine vs CPython Jinja2, and over threads", RunBenchChat},
    {"convert", "moe convert MB/s vs. raw O_DIRECT read MB/s of the same input", RunBenchConvert},
    {"dense", "the resident (dense) decode path vs its floor (bytes / measured memory bandwidth), 300-32K cached, batched",
     RunBenchDense},
    {"e2e", "expert path of decode steps through expertd on a moe synth slice vs disk/compute floors", RunBenchE2e},
    {"io", "expertd miss path vs raw O_DIRECT reads; io_uring vs pread pool", RunBenchIo},
    {"kernels", "quantized matmul GB/s, GFLOP/s and ratio to measured memory bandwidth", RunBenchKernels},
    {"lease", "expertd: cost of leasing a cached expert from shared memory (+ RPC)", RunBenchLease},
    {"prefill", "chunked vs planned (layer-major) prefill: TTFT, expert bytes vs distinct; returning conversations",
     RunBenchPrefill},
    {"spec", "speculative decoding: off vs mtp vs ngram vs auto x K, one stream and S streams; planted acceptance",
     RunBenchSpec},
    {"structured", "structured outputs: compile ms per schema, mask us per token, sampling with/without", RunBenchStructured},
    {"tokenize", "encode MB/s of the tokenizer vs Hugging Face tokenizers on the same corpus", RunBenchTokenize},
};

void PrintUsage(FILE* f) {
  std::fprintf(f, "usage: moe bench <what> [flags]   (moe bench <what> --help for flags)\n");
  for (const auto& t : kTargets) std::fprintf(f, "  %-10s %s\n", t.name, t.summary);
}
}  // namespace

int RunBench(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    PrintUsage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const auto& t : kTargets)
    if (std::strcmp(argv[1], t.name) == 0) return t.run(argc - 1, argv + 1);
  PrintUsage(stderr);
  return Fail("bench", absl::InvalidArgumentError(absl::StrCat("unknown benchmark '", argv[1], "'")));
}

}  // namespace moe::cli
