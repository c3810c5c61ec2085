#include "tools/moe/commands.h"

#include <cstdio>

namespace moe::cli {

// Declarations of the subcommands implemented in cmd_*.cc, one line each
// (this file merges with git's union driver: see .gitattributes).
int RunBench(int argc, char** argv);
int RunConvert(int argc, char** argv);
int RunHeat(int argc, char** argv);
int RunInspect(int argc, char** argv);
int RunMtp(int argc, char** argv);
int RunOwnership(int argc, char** argv);
int RunPlan(int argc, char** argv);
int RunQuality(int argc, char** argv);
int RunRun(int argc, char** argv);
int RunScore(int argc, char** argv);
int RunSynth(int argc, char** argv);
int RunTokenize(int argc, char** argv);
int RunVersion(int argc, char** argv);

namespace {
// One row per line, sorted by name.
const Command kCommands[] = {
    {"bench", "benchmarks: moe bench <what> (moe bench --help lists them)", RunBench},
    {"convert", "convert an HF FP8/BF16 checkpoint into a moestream container", RunConvert},
    {"heat", "expertd admin: tiers, hit rates, expert heat (--json, --png), pin/unpin, budget", RunHeat},
    {"inspect", "census of a container or checkpoint: bytes per format, role, layer", RunInspect},
    {"mtp", "MTP draft acceptance rate on a text file or a generated answer", RunMtp},
    {"ownership", "the (layer, expert) -> host map of an expert-parallel group (inferd --ownership-map)", RunOwnership},
    {"plan", "the serving plan in a RAM budget: formats, context, expert cache, bytes and floor tok/s per token", RunPlan},
    {"quality", "quantization quality table vs oracle goldens (experts x dense formats)", RunQuality},
    {"run", "generate tokens from a model directory (--model, --prompt-ids, --max-tokens, ...)", RunRun},
    {"score", "teacher-forced argmax and log-probabilities of --ids", RunScore},
    {"synth", "full-size stand-in of a real model (--config glm-5 ...), or an expert slice for moe bench e2e", RunSynth},
    {"tokenize", "text to token ids (and back) with a tokenizer.json; chat prompts", RunTokenize},
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
