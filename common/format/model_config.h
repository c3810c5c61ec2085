// ModelConfig: config.json of a glm_moe_dsa (GLM-5.x) or deepseek_v3 checkpoint
// as a typed, validated struct (docs/MODEL.md section 2).
//
// Contract: ParseModelConfig never guesses a shape. The shape fields
// (hidden_size, layer count, head dims, ranks, expert counts, vocab) must be
// present; other fields take Hugging Face's class defaults for the model_type.
// Any missing or inconsistent field yields InvalidArgument naming the field.
// `head_dim` is read but never used for shapes (docs/MODEL.md section 6 item 8).
// Derived quantities (RoPE inverse frequencies, softmax scale, per-layer
// dense/MoE and full/shared indexer layout) are computed here once, with
// HF's float32 numerics, so the engine has one source of truth.
// Thread safety: immutable after parsing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace moe {

enum class ModelArch { kGlmMoeDsa, kDeepseekV3 };

struct RopeConfig {
  std::string type = "default";  // "default" or "yarn"
  double theta = 10000.0;
  // YaRN (type == "yarn"); HF _compute_yarn_parameters semantics.
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 0.0;          // 0 = absent
  double mscale_all_dim = 0.0;  // 0 = absent
  double attention_factor = 0.0;  // 0 = absent (derived, see below)
  bool truncate = true;
};

struct ModelConfig {
  ModelArch arch = ModelArch::kGlmMoeDsa;
  std::string model_type;

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t moe_intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int n_shared_experts = 1;
  int n_routed_experts = 0;
  int num_experts_per_tok = 0;
  int n_group = 1;
  int topk_group = 1;
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;
  std::string scoring_func = "sigmoid";
  std::string topk_method = "noaux_tc";
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  int64_t head_dim_unused = 0;  // config.json head_dim; informational only
  std::string hidden_act = "silu";
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  int first_k_dense_replace = 0;
  int moe_layer_freq = 1;
  std::vector<bool> layer_is_moe;  // size num_hidden_layers

  // DSA indexer (glm_moe_dsa only).
  bool has_indexer = false;
  int index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;
  std::vector<bool> indexer_full;  // size num_hidden_layers; false = "shared"
  bool index_share_for_mtp_iteration = false;

  RopeConfig rope;
  bool rope_interleave = true;
  bool indexer_rope_interleave = true;

  std::vector<int64_t> eos_token_ids;
  int64_t pad_token_id = -1;  // -1 = absent
  int num_nextn_predict_layers = 0;
  std::string moe_router_dtype;  // "" if absent
  std::string dtype;             // config "dtype" / "torch_dtype" ("" if absent)

  // FP8 block quantization (quantization_config.quant_method == "fp8").
  bool fp8 = false;
  int64_t fp8_block_rows = 128;
  int64_t fp8_block_cols = 128;

  // ---- derived ----
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  // RoPE inverse frequencies (qk_rope_head_dim / 2 values), float32 as HF.
  std::vector<float> rope_inv_freq;
  // Multiplier on cos/sin (HF attention_scaling; 1 for default rope).
  float rope_attention_factor = 1.0f;
  // Softmax scale of MLA scores: qk_head_dim^-1/2 (times YaRN mscale^2).
  double softmax_scale = 0.0;
};

// Parses config.json text. `source` names the file in error messages.
absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view source = "config.json");
// Reads and parses DIR/config.json.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir);

}  // namespace moe
