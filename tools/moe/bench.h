// `moe bench <what>`: benchmark programs, one file each (bench_<what>.cc),
// listed in kBenches (cmd_bench.cc, sorted by name). Each reports ratios to
// floors measured in the same run (median + spread of repeats) and takes
// --json for machine-readable output.
#pragma once

namespace moe::cli {

struct Bench {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);  // argv[0] = "<what>"
};

// One line per benchmark (this file merges with git's union driver).
int BenchCache(int argc, char** argv);
int BenchIo(int argc, char** argv);
int BenchLease(int argc, char** argv);
int RunBenchConvert(int argc, char** argv);
int RunBenchKernels(int argc, char** argv);
int RunBenchTokenize(int argc, char** argv);

}  // namespace moe::cli
