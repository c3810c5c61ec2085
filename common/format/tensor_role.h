// What a checkpoint tensor is, from its name (GLM-5 `glm_moe_dsa` and
// DeepSeek-V3 names, docs/MODEL.md section 3), and which stored format the
// conversion policy gives it.
//
// Problem in numbers: GLM-5 has ~92k tensors; 59,904 of them are routed
// expert matrices (78 MoE layers incl. MTP x 256 x 3) = ~95% of the bytes.
// The policy decides the container size (~390 GB with q4_g64 experts).
//
// Contract: Classify never guesses: a name it does not know is an error
// (InvalidArgument naming the tensor), so a new checkpoint layout cannot be
// silently converted with the wrong format. FP8 block-scale tensors
// ("*_scale_inv") are not classified; they are inputs of their weight.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/format/qformat.h"

namespace moe {

enum class TensorRole : uint8_t {
  kExpert = 0,     // mlp.experts.E.{gate,up,down}_proj.weight
  kAttention,      // self_attn.{q_a,q_b,kv_a_proj_with_mqa,kv_b,o}_proj.weight
  kIndexer,        // self_attn.indexer.{wq_b,wk,weights_proj}.weight
  kDenseMlp,       // mlp.{gate,up,down}_proj.weight (dense layers)
  kSharedExpert,   // mlp.shared_experts.*
  kEmbedding,      // embed_tokens (incl. DeepSeek's MTP copy)
  kLmHead,         // lm_head (incl. DeepSeek's MTP shared_head.head)
  kNorm,           // every norm weight/bias
  kRouter,         // mlp.gate.weight, mlp.gate.e_score_correction_bias
  kMtpProj,        // MTP eh_proj
};
inline constexpr int kNumTensorRoles = 10;

std::string_view RoleName(TensorRole r);

enum class ExpertProj : int8_t { kNone = -1, kGate = 0, kUp = 1, kDown = 2 };
inline constexpr std::string_view kExpertProjNames[3] = {"gate_proj", "up_proj", "down_proj"};

struct TensorClass {
  TensorRole role = TensorRole::kNorm;
  int layer = -1;      // -1 for global tensors (embed, final norm, lm_head)
  bool mtp = false;    // layer >= num_hidden_layers
  int expert = -1;     // routed expert id, or -1
  ExpertProj proj = ExpertProj::kNone;
};

// `num_hidden_layers` is config.json's L; layers >= L are MTP layers.
absl::StatusOr<TensorClass> Classify(std::string_view name, int num_hidden_layers);

// Census group: the role, except that every tensor of an MTP layer counts as "mtp".
std::string_view CensusGroup(const TensorClass& c);

// Stored format per role. Defaults follow issue 2 (routed experts q4_g64;
// attention, dense MLP, shared experts, indexer and MTP int8 grouped;
// embeddings and lm_head q8_row; norms, router and correction bias f32).
// 1-D tensors are always f32.
struct ConvertPolicy {
  QFormat experts = QFormat::kQ4G64;
  QFormat attention = QFormat::kQ8G128;
  QFormat dense_mlp = QFormat::kQ8G128;
  QFormat shared_experts = QFormat::kQ8G128;
  QFormat indexer = QFormat::kQ8G128;
  QFormat embedding = QFormat::kQ8Row;
  QFormat lm_head = QFormat::kQ8Row;
  QFormat mtp = QFormat::kQ8G128;  // every matrix of an MTP layer except embed/head copies

  // "default" (= "dense-int8") or "dense-int4" (attention, dense MLP and
  // shared experts q4_g64). InvalidArgument for other names.
  static absl::StatusOr<ConvertPolicy> Named(std::string_view name);
  // The format for one tensor of `ndim` dimensions.
  QFormat FormatFor(const TensorClass& c, int ndim) const;
  // Stable text form, stored in the conversion plan ("experts=q4_g64,...").
  std::string ToString() const;
};

}  // namespace moe
