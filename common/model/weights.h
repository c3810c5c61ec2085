// Resident (non-expert) weights of a glm_moe_dsa / deepseek_v3 model, and the
// loader of routed experts from a checkpoint.
//
// Resident set for GLM-5 (bf16): embeddings 1.9 GB + lm_head 1.9 GB +
// attention/indexer/shared expert/router/dense MLP ~ 20 GB; routed experts
// (~1.4 TB at bf16) are never resident here: they come through ExpertSource.
// Matrices keep their stored precision (bf16 / f32); FP8 block-quantized
// tensors are dequantized to bf16 at load, as HF does.
// Loading validates every tensor's presence and shape against the config and
// fails with the tensor's name. Thread safety: immutable after loading.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/format/model_config.h"
#include "common/expert_source/expert_source.h"
#include "common/format/container.h"
#include "common/format/safetensors.h"
#include "common/model/linear.h"

namespace moe {

struct OwnedMatrix {
  WeightMatrix m;
  std::vector<uint8_t> data;
  std::vector<float> scales;
  // Set when m.data/m.scales point into memory the matrix does not own (data/scales then empty): a
  // shared read-only mapping of a container shard, or the buffer an expert record was read into.
  // Keeps it alive.
  std::shared_ptr<const void> mapping;
  // From format and shape, so a planned (data-less) matrix counts the same.
  int64_t Bytes() const { return m.rows == 0 ? 0 : StoredMatrixBytes(m.format, m.rows, m.cols); }
};

struct LayerWeights {
  int index = 0;
  std::vector<float> input_norm, post_norm;
  OwnedMatrix q_a, q_b, kv_a, kv_b, o;
  std::vector<float> q_a_norm, kv_a_norm;
  bool has_indexer = false;
  OwnedMatrix idx_wq_b, idx_wk, idx_wp;  // idx_wp kept f32 (HF keeps weights_proj fp32)
  std::vector<float> idx_k_norm_w, idx_k_norm_b;
  bool moe = false;
  OwnedMatrix gate, up, down;  // dense MLP (moe == false)
  OwnedMatrix router;          // f32 [E, H]
  std::vector<float> router_bias;
  bool has_shared = false;
  OwnedMatrix sh_gate, sh_up, sh_down;
  int64_t Bytes() const;
};

struct MtpWeights {
  std::vector<float> enorm, hnorm, shared_head_norm;
  OwnedMatrix eh_proj;  // [H, 2H]
  LayerWeights layer;
};

struct ModelWeights {
  OwnedMatrix embed;    // [V, H]
  OwnedMatrix lm_head;  // [V, H]
  std::vector<float> final_norm;
  std::vector<LayerWeights> layers;
  std::unique_ptr<MtpWeights> mtp;  // null if the checkpoint has no MTP layer
  int64_t Bytes() const;
};

struct LoadOptions {
  bool load_mtp = true;  // load layer L if present
};

// Memory plan, computed by walking the loader without reading data: the bytes
// the resident set will take as loaded from this source (stored formats: int8
// embeddings of a container count 1 byte per weight, bf16 of a checkpoint 2),
// after RequantizeDense to `dense_format` if set. Missing or misshapen tensors
// are the loader's errors. `*has_mtp` (optional) tells whether layer L loads.
absl::StatusOr<int64_t> PlanResidentBytes(const SafetensorsReader& ck, const ModelConfig& c, const LoadOptions& opt,
                                          std::optional<QFormat> dense_format, bool* has_mtp = nullptr);
absl::StatusOr<int64_t> PlanResidentBytes(const Container& ck, const ModelConfig& c, const LoadOptions& opt,
                                          std::optional<QFormat> dense_format, bool* has_mtp = nullptr);
// Every tensor the resident loader takes, as it will hold it: loaded format,
// bytes, and whether it stays a shared read-only mapping of a container shard
// (page cache, one copy for all processes) or becomes a private copy.
struct PlannedTensor {
  std::string name;
  QFormat format = QFormat::kF32;
  int64_t rows = 0, cols = 0;
  int64_t bytes = 0;
  bool mapped = false;
};
absl::StatusOr<std::vector<PlannedTensor>> PlanResidentParts(const SafetensorsReader& ck, const ModelConfig& c,
                                                             const LoadOptions& opt);
absl::StatusOr<std::vector<PlannedTensor>> PlanResidentParts(const Container& ck, const ModelConfig& c,
                                                             const LoadOptions& opt);
// Bytes of one routed expert of `layer` as the expert store holds it (stored
// formats, or `expert_format` when experts are re-stored at load).
absl::StatusOr<int64_t> PlanExpertBytes(const SafetensorsReader& ck, const ModelConfig& c, int layer,
                                        std::optional<QFormat> expert_format);
absl::StatusOr<int64_t> PlanExpertBytes(const Container& ck, const ModelConfig& c, int layer,
                                        std::optional<QFormat> expert_format);

// Opens a Hugging Face checkpoint directory through common/format's reader:
// model.safetensors.index.json + shards, else model.safetensors, else every
// *.safetensors in `dir` (or `dir` itself when it is a file).
absl::StatusOr<std::unique_ptr<SafetensorsReader>> OpenCheckpoint(const std::string& dir);

absl::StatusOr<std::unique_ptr<ModelWeights>> LoadResidentWeights(const SafetensorsReader& ck, const ModelConfig& c,
                                                                   const LoadOptions& opt = {});

// Re-stores a matrix in `f` (quantizing its current values); no-op if it
// already has that format.
absl::Status Requantize(OwnedMatrix& m, QFormat f, std::string_view what);
// Requantizes every dense (non-expert) projection of the resident set: the
// attention, indexer wq_b/wk, dense MLP and shared-expert matrices. The
// embedding, lm_head, router and indexer weights_proj stay as stored.
absl::Status RequantizeDense(ModelWeights& w, QFormat f);

// An owned expert (three matrices).
struct OwnedExpert {
  OwnedMatrix gate, up, down;
  ExpertWeights View() const { return {gate.m, up.m, down.m}; }
  int64_t Bytes() const { return gate.Bytes() + up.Bytes() + down.Bytes(); }
};

// Reads routed expert (layer, e) from the checkpoint (per-expert tensors or
// HF's fused gate_up_proj/down_proj), checking shapes.
// The same from a converted container (moe convert): matrices keep the
// container's QFormat (q8/q4 go through the quantized kernels).
absl::StatusOr<std::unique_ptr<ModelWeights>> LoadResidentWeights(const Container& ck, const ModelConfig& c,
                                                                   const LoadOptions& opt = {});
absl::StatusOr<OwnedExpert> LoadExpertFromContainer(const Container& ck, int layer, int e);
absl::Status ValidateExperts(const Container& ck, const ModelConfig& c, bool with_mtp);

absl::StatusOr<OwnedExpert> LoadExpertFromCheckpoint(const SafetensorsReader& ck, const ModelConfig& c, int layer, int e);
// Verifies that every routed expert tensor of every MoE layer is present with
// the right shape (without reading data), so a bad checkpoint fails at load.
absl::Status ValidateExperts(const SafetensorsReader& ck, const ModelConfig& c, bool with_mtp);

}  // namespace moe
