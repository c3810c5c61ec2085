// Full-size stand-ins of real checkpoints (`moe synth --config`): the real
// config, tensor names, shapes, dtypes and shard layout of a GLM-5.x or
// DeepSeek-V3 release, with deterministic synthetic content (docs/SYNTH.md).
//
// Problem in numbers: GLM-5-FP8 is ~756 GB in ~150 shards of 5 GB and
// ~120,000 tensors; 97% of its bytes are routed experts. No such checkpoint
// can be had here, and the disk holds ~75 GB. So routed experts are file
// holes (sparse files: no disk, read back as zeros) except the layers named
// in `real_expert_layers`; everything else (~21 GB for GLM-5 in FP8) is
// written: resident weights pseudo-random with 1/sqrt(fan-in) spread, norms
// one, routers random (token-dependent logits) with a planted
// e_score_correction_bias that makes routing Zipf-like.
//
// FP8: where the config has quantization_config (fp8, 128x128 blocks), the
// linear layers the releases store in FP8 (attention projections, indexer
// wq_b / wk, dense MLPs, shared and routed experts) are float8_e4m3fn with
// an F32 `weight_scale_inv` of [ceil(out/128), ceil(in/128)] blocks, minus
// the modules named by `modules_to_not_convert` (prefixes of module paths,
// matched at '.' boundaries so `mlp.gate` does not swallow `mlp.gate_proj`;
// GLM's `self_attn.indexers_proj` matches no tensor and is reported as
// such). Everything else is BF16, e_score_correction_bias F32.
//
// Determinism: the bytes depend only on the config, the seed and the set
// of real expert layers (integer RNG, no libm), not on threads or machine.
//
// Thread safety: functions are reentrant; they use OpenMP internally.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/format/convert.h"
#include "common/format/model_config.h"
#include "common/format/safetensors_writer.h"

namespace moe {

// Spread of the planted router skew: expert e of layer l gets
// e_score_correction_bias = -kSynthRouterSkew * ln(1 + rank_l(e)), rank_l a
// per-layer permutation. With router logits of unit spread this makes the
// k-th most used expert's share fall roughly like k^-0.8 (docs/SYNTH.md).
inline constexpr double kSynthRouterSkew = 0.06;

struct SynthTensor {
  TensorSpec spec;
  enum class Fill : uint8_t {
    kRandom,      // values with spread `sigma` (FP8: codes; the scale tensor carries the spread)
    kOnes,        // norm weights
    kZeros,       // LayerNorm bias (not written: a hole)
    kRouterBias,  // e_score_correction_bias with the planted skew
    kFp8Scales,   // weight_scale_inv of the FP8 tensor before it
  } fill = Fill::kRandom;
  double sigma = 0;
  int layer = -1;    // -1: global tensors
  int expert = -1;   // routed expert id, or -1
  bool hole = false; // not written (routed experts outside real_expert_layers)
};

struct SynthPlan {
  std::string config_json;  // the config.json written (after overrides)
  ModelConfig config;
  std::vector<SynthTensor> tensors;          // in file order
  std::vector<std::vector<int>> shards;      // tensor indices per shard file
  std::vector<std::string> shard_files;      // model-0000K-of-0000N.safetensors
  std::vector<std::string> unmatched_exclusions;  // modules_to_not_convert entries matching no tensor
  uint64_t total_bytes = 0;                  // sum of tensor bytes (the index's total_size)
  uint64_t written_bytes = 0;                // bytes that are not holes
  int fp8_tensors = 0;
};

struct SynthOptions {
  std::set<int> real_expert_layers;  // routed experts of these layers get bytes
  uint64_t seed = 1;
  uint64_t max_shard_bytes = 5'000'000'000;  // HF save_pretrained's max_shard_size "5GB"
  std::string tokenizer_dir;                 // copy tokenizer.json & co. from here ("" = none)
};

// The built-in release configs shipped in models/configs/: "glm-5",
// "glm-5.2", "deepseek-v3". NotFound (listing the names) for others.
absl::StatusOr<std::string> BuiltinConfig(std::string_view name);
std::vector<std::string> BuiltinConfigNames();

// Applies `key=value` overrides to config.json text (value as JSON, else as a
// string). Changing num_hidden_layers also cuts the per-layer lists
// (mlp_layer_types, indexer_types) to the new count and renumbers the MTP
// layer's entries of modules_to_not_convert, so a 2-layer model keeps the
// release's per-layer rules. InvalidArgument naming the key on bad input.
absl::StatusOr<std::string> ApplyConfigOverrides(std::string_view config_json,
                                                 const std::vector<std::pair<std::string, std::string>>& overrides);

// Every tensor of the checkpoint, its dtype, content and shard.
absl::StatusOr<SynthPlan> PlanSynthCheckpoint(std::string_view config_json, const SynthOptions& options);

struct SynthProgress {
  uint64_t bytes_done = 0, bytes_total = 0;  // bytes written (holes excluded)
  int shard = 0, num_shards = 0;
  double elapsed_s = 0;
};

struct SynthResult {
  int shards = 0;
  uint64_t total_bytes = 0, written_bytes = 0;
  double seconds = 0;
  ConvertResult convert;  // container mode
};

// Writes an HF checkpoint directory: config.json, generation_config.json,
// synth.json (what was synthesized), the shards, model.safetensors.index.json
// and the tokenizer files if asked for.
absl::StatusOr<SynthResult> SynthesizeCheckpoint(const SynthPlan& plan, const SynthOptions& options,
                                                 const std::string& out_dir,
                                                 const std::function<void(const SynthProgress&)>& progress = {});

// Writes a moestream container: the checkpoint above, built shard by shard
// just before `moe convert` (ConvertCheckpoint, `convert` options: policy,
// verify, max_shards, progress) reads it, and deleted once converted, in
// `work_dir` (default OUT/.synth-checkpoint). Disk: the container plus about
// one input shard. Resumable like convert: run again to continue.
absl::StatusOr<SynthResult> SynthesizeContainer(const SynthPlan& plan, const SynthOptions& options,
                                                ConvertOptions convert, std::string work_dir = "");

}  // namespace moe
