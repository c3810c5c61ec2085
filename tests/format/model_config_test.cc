#include "common/format/model_config.h"

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace moe {
namespace {

using nlohmann::json;

json GlmBase() {
  return json::parse(R"({
    "model_type": "glm_moe_dsa", "vocab_size": 154880, "hidden_size": 6144,
    "intermediate_size": 12288, "moe_intermediate_size": 2048, "num_hidden_layers": 78,
    "num_attention_heads": 64, "num_key_value_heads": 64, "n_shared_experts": 1,
    "n_routed_experts": 256, "num_experts_per_tok": 8, "n_group": 1, "topk_group": 1,
    "norm_topk_prob": true, "routed_scaling_factor": 2.5, "q_lora_rank": 2048, "kv_lora_rank": 512,
    "qk_nope_head_dim": 192, "qk_rope_head_dim": 64, "v_head_dim": 256, "head_dim": 64,
    "max_position_embeddings": 202752, "rms_norm_eps": 1e-5, "first_k_dense_replace": 3,
    "index_n_heads": 32, "index_head_dim": 128, "index_topk": 2048,
    "rope_parameters": {"rope_theta": 1000000, "rope_type": "default"},
    "eos_token_id": [154820, 154827, 154829], "pad_token_id": 154820, "num_nextn_predict_layers": 1
  })");
}

json DsBase() {
  return json::parse(R"({
    "model_type": "deepseek_v3", "vocab_size": 129280, "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
    "num_attention_heads": 128, "n_routed_experts": 256, "num_experts_per_tok": 8,
    "n_group": 8, "topk_group": 4, "q_lora_rank": 1536, "kv_lora_rank": 512,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "max_position_embeddings": 163840, "rms_norm_eps": 1e-6, "first_k_dense_replace": 3,
    "moe_layer_freq": 1, "rope_theta": 10000, "eos_token_id": 1,
    "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                     "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}
  })");
}

absl::StatusOr<ModelConfig> Parse(const json& j) { return ParseModelConfig(j.dump()); }

void ExpectFieldError(const json& j, const std::string& field) {
  auto c = Parse(j);
  ASSERT_FALSE(c.ok()) << "expected an error about " << field;
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(c.status().message()).find("'" + field + "'"), std::string::npos) << c.status().message();
}

TEST(ModelConfig, Glm5) {
  auto c = Parse(GlmBase());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, ModelArch::kGlmMoeDsa);
  EXPECT_EQ(c->qk_head_dim(), 256);
  EXPECT_DOUBLE_EQ(c->softmax_scale, 1.0 / 16);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{154820, 154827, 154829}));
  ASSERT_EQ(c->rope_inv_freq.size(), 32u);
  EXPECT_FLOAT_EQ(c->rope_inv_freq[0], 1.0f);
  EXPECT_NEAR(c->rope_inv_freq[1], std::pow(1e6, -2.0 / 64), 1e-7);
  EXPECT_FLOAT_EQ(c->rope_attention_factor, 1.0f);
  ASSERT_EQ(c->indexer_full.size(), 78u);
  for (bool f : c->indexer_full) EXPECT_TRUE(f);  // absent => all full
  EXPECT_FALSE(c->layer_is_moe[2]);
  EXPECT_TRUE(c->layer_is_moe[3]);
  EXPECT_EQ(c->head_dim_unused, 64);
}

TEST(ModelConfig, Glm52SharedIndexerFromFreqOffset) {
  json j = GlmBase();
  j["index_topk_freq"] = 4;
  j["index_skip_topk_offset"] = 3;
  j["index_share_for_mtp_iteration"] = true;
  j["head_dim"] = 192;  // must not matter
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  int full = 0;
  for (bool f : c->indexer_full) full += f;
  EXPECT_EQ(full, 21);
  EXPECT_TRUE(c->indexer_full[0] && c->indexer_full[1] && c->indexer_full[2] && c->indexer_full[6]);
  EXPECT_FALSE(c->indexer_full[3] || c->indexer_full[4] || c->indexer_full[5]);
  EXPECT_TRUE(c->indexer_full[74]);
  EXPECT_TRUE(c->index_share_for_mtp_iteration);
  EXPECT_DOUBLE_EQ(c->softmax_scale, 1.0 / 16);
}

TEST(ModelConfig, IndexerTypesAndPattern) {
  json j = GlmBase();
  j["num_hidden_layers"] = 4;
  j["index_topk_pattern"] = "FSFS";
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->indexer_full, (std::vector<bool>{true, false, true, false}));
  j["indexer_types"] = {"full", "full", "shared", "full"};  // explicit list wins
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->indexer_full, (std::vector<bool>{true, true, false, true}));
  j["indexer_types"] = {"full", "full"};
  ExpectFieldError(j, "indexer_types");
  j["indexer_types"] = {"shared", "full", "full", "full"};
  ExpectFieldError(j, "indexer_types");
  j.erase("indexer_types");
  j["index_topk_pattern"] = "FXFS";
  ExpectFieldError(j, "index_topk_pattern");
}

TEST(ModelConfig, DeepseekYarnLegacyFields) {
  auto c = Parse(DsBase());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, ModelArch::kDeepseekV3);
  EXPECT_FALSE(c->has_indexer);
  EXPECT_EQ(c->rope.type, "yarn");
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{1}));
  // mscale == mscale_all_dim => cos/sin factor 1; softmax scale gets mscale^2.
  EXPECT_FLOAT_EQ(c->rope_attention_factor, 1.0f);
  const double m = 0.1 * std::log(40.0) + 1.0;
  EXPECT_NEAR(c->softmax_scale, m * m / std::sqrt(192.0), 1e-12);
  // Ramp: low = floor(64 ln(4096/(32 2pi)) / (2 ln 1e4)) = 10, high = ceil(... 1 ...) = 23.
  EXPECT_FLOAT_EQ(c->rope_inv_freq[0], 1.0f);                              // extrapolation
  EXPECT_NEAR(c->rope_inv_freq[31], std::pow(1e4, -62.0 / 64) / 40, 1e-9);  // interpolation
  EXPECT_NEAR(c->rope_inv_freq[10], std::pow(1e4, -20.0 / 64), 1e-7);
}

TEST(ModelConfig, RopeParametersNewStyleYarnNoMscale) {
  json j = DsBase();
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 10000}, {"factor", 4},
                          {"original_max_position_embeddings", 4096}};
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_NEAR(c->rope_attention_factor, 0.1 * std::log(4.0) + 1.0, 1e-6);
  EXPECT_NEAR(c->softmax_scale, 1.0 / std::sqrt(192.0), 1e-12);
}

TEST(ModelConfig, MissingAndInconsistentFieldsAreNamed) {
  for (const char* f : {"hidden_size", "num_hidden_layers", "vocab_size", "kv_lora_rank", "qk_rope_head_dim",
                        "v_head_dim", "n_routed_experts", "q_lora_rank", "model_type"}) {
    json j = GlmBase();
    j.erase(f);
    ExpectFieldError(j, f);
  }
  json j = GlmBase();
  j["hidden_size"] = "big";
  ExpectFieldError(j, "hidden_size");
  j = GlmBase();
  j["model_type"] = "llama";
  ExpectFieldError(j, "model_type");
  j = DsBase();
  j["n_group"] = 3;
  ExpectFieldError(j, "n_group");
  j = DsBase();
  j["topk_group"] = 9;
  ExpectFieldError(j, "topk_group");
  j = GlmBase();
  j["eos_token_id"] = 999999;
  ExpectFieldError(j, "eos_token_id");
  j = GlmBase();
  j["rope_parameters"] = {{"rope_type", "dynamic"}, {"rope_theta", 10000}};
  ExpectFieldError(j, "rope_parameters.rope_type");
  j = GlmBase();
  j.erase("rope_parameters");
  ExpectFieldError(j, "rope_parameters.rope_theta");
  j = GlmBase();
  j["mlp_layer_types"] = {"dense"};
  ExpectFieldError(j, "mlp_layer_types");
  EXPECT_FALSE(ParseModelConfig("{not json").ok());
}

TEST(ModelConfig, MlpLayerTypesAndFp8) {
  json j = GlmBase();
  j["num_hidden_layers"] = 3;
  j["mlp_layer_types"] = {"dense", "sparse", "dense"};
  j["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {128, 128}}};
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->layer_is_moe, (std::vector<bool>{false, true, false}));
  EXPECT_TRUE(c->fp8);
  j["quantization_config"]["quant_method"] = "gptq";
  ExpectFieldError(j, "quantization_config.quant_method");
}

}  // namespace
}  // namespace moe
