// Writes a small random-weight HF-style checkpoint (config.json +
// model.safetensors, BF16) for tests that must run without the oracle data:
// bad-input handling, batch invariance, cache budgets, persistence, MTP.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/model/bf16.h"

namespace moe::testing {

struct TinySpec {
  bool glm = true;
  int layers = 3;
  int64_t index_topk = 6;  // small: the indexer really selects
  std::vector<std::string> indexer_types = {"full", "shared", "full"};
  std::string omit_tensor;     // leave this tensor out
  std::string reshape_tensor;  // write this tensor with one extra row
  int64_t max_pos = 256;
  uint32_t seed = 7;
};

inline nlohmann::json TinyConfig(const TinySpec& s) {
  nlohmann::json c = {
      {"model_type", s.glm ? "glm_moe_dsa" : "deepseek_v3"},
      {"vocab_size", 97}, {"hidden_size", 32}, {"intermediate_size", 48}, {"moe_intermediate_size", 16},
      {"num_hidden_layers", s.layers}, {"num_attention_heads", 2}, {"num_key_value_heads", 2},
      {"n_shared_experts", 1}, {"n_routed_experts", 8}, {"num_experts_per_tok", 2},
      {"n_group", s.glm ? 1 : 4}, {"topk_group", s.glm ? 1 : 2}, {"routed_scaling_factor", 2.5},
      {"norm_topk_prob", true}, {"q_lora_rank", 24}, {"kv_lora_rank", 20}, {"qk_nope_head_dim", 12},
      {"qk_rope_head_dim", 8}, {"v_head_dim", 10}, {"max_position_embeddings", s.max_pos},
      {"rms_norm_eps", s.glm ? 1e-5 : 1e-6}, {"first_k_dense_replace", 1}, {"dtype", "bfloat16"},
      {"eos_token_id", {96}}, {"num_nextn_predict_layers", 1}};
  if (s.glm) {
    c["index_n_heads"] = 3;
    c["index_head_dim"] = 16;
    c["index_topk"] = s.index_topk;
    c["indexer_types"] = s.indexer_types;
    c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  } else {
    c["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 10000.0}, {"factor", 40.0},
                            {"original_max_position_embeddings", 64}, {"mscale", 1.0}, {"mscale_all_dim", 1.0}};
  }
  return c;
}

inline void WriteTinyCheckpoint(const std::string& dir, const TinySpec& s) {
  std::filesystem::create_directories(dir);
  const nlohmann::json c = TinyConfig(s);
  std::ofstream(dir + "/config.json") << c.dump(1);
  const int64_t H = 32, V = 97, I = 48, Im = 16, nh = 2, dn = 12, dr = 8, dv = 10, rq = 24, rkv = 20, E = 8;
  const int64_t ih = 3, id = 16;
  std::mt19937 rng(s.seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.8f, 1.2f);
  struct T {
    std::vector<int64_t> shape;
    std::vector<float> v;
    bool f32 = false;
  };
  std::map<std::string, T> ts;
  auto lin = [&](const std::string& n, int64_t o, int64_t i, float gain = 1.0f) {
    T t{{o, i}, std::vector<float>(o * i)};
    for (auto& x : t.v) x = nd(rng) * gain / std::sqrt(static_cast<float>(i));
    ts[n] = t;
  };
  auto norm = [&](const std::string& n, int64_t k) {
    T t{{k}, std::vector<float>(k)};
    for (auto& x : t.v) x = ud(rng);
    ts[n] = t;
  };
  auto layer = [&](int l, bool moe, bool indexer) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    norm(p + "input_layernorm.weight", H);
    norm(p + "post_attention_layernorm.weight", H);
    const std::string a = p + "self_attn.";
    lin(a + "q_a_proj.weight", rq, H);
    norm(a + "q_a_layernorm.weight", rq);
    lin(a + "q_b_proj.weight", nh * (dn + dr), rq, 2.0f);
    lin(a + "kv_a_proj_with_mqa.weight", rkv + dr, H, 1.5f);
    norm(a + "kv_a_layernorm.weight", rkv);
    lin(a + "kv_b_proj.weight", nh * (dn + dv), rkv, 1.5f);
    lin(a + "o_proj.weight", H, nh * dv);
    if (indexer) {
      lin(a + "indexer.wq_b.weight", ih * id, rq, 1.5f);
      lin(a + "indexer.wk.weight", id, H);
      norm(a + "indexer.k_norm.weight", id);
      T b{{id}, std::vector<float>(id)};
      for (auto& x : b.v) x = 0.1f * nd(rng);
      ts[a + "indexer.k_norm.bias"] = b;
      lin(a + "indexer.weights_proj.weight", ih, H);
    }
    const std::string m = p + "mlp.";
    if (!moe) {
      lin(m + "gate_proj.weight", I, H);
      lin(m + "up_proj.weight", I, H);
      lin(m + "down_proj.weight", H, I, 1.5f);
    } else {
      lin(m + "gate.weight", E, H, 1.5f);
      T b{{E}, std::vector<float>(E), true};
      for (auto& x : b.v) x = 0.05f * nd(rng);
      ts[m + "gate.e_score_correction_bias"] = b;
      for (int e = 0; e < E; ++e) {
        const std::string x = m + "experts." + std::to_string(e) + ".";
        lin(x + "gate_proj.weight", Im, H);
        lin(x + "up_proj.weight", Im, H);
        lin(x + "down_proj.weight", H, Im, 1.5f);
      }
      lin(m + "shared_experts.gate_proj.weight", Im, H);
      lin(m + "shared_experts.up_proj.weight", Im, H);
      lin(m + "shared_experts.down_proj.weight", H, Im, 1.5f);
    }
  };
  {
    T e{{V, H}, std::vector<float>(V * H)};
    for (auto& x : e.v) x = nd(rng);
    ts["model.embed_tokens.weight"] = e;
  }
  norm("model.norm.weight", H);
  lin("lm_head.weight", V, H, 4.0f);
  for (int l = 0; l < s.layers; ++l) {
    const bool full = s.glm && (l < static_cast<int>(s.indexer_types.size()) ? s.indexer_types[l] == "full" : true);
    layer(l, l >= 1, full);
  }
  const std::string p = "model.layers." + std::to_string(s.layers) + ".";
  layer(s.layers, true, s.glm);
  norm(p + "enorm.weight", H);
  norm(p + "hnorm.weight", H);
  lin(p + "eh_proj.weight", H, 2 * H);
  norm(p + "shared_head.norm.weight", H);

  nlohmann::json hdr = nlohmann::json::object();
  std::string data;
  for (auto& [name, t] : ts) {
    if (name == s.omit_tensor) continue;
    std::vector<int64_t> shape = t.shape;
    std::vector<float> v = t.v;
    if (name == s.reshape_tensor) {
      shape[0] += 1;
      v.resize(v.size() + (shape.size() > 1 ? shape[1] : 1), 0.5f);
    }
    const size_t begin = data.size();
    for (float x : v) {
      if (t.f32) {
        data.append(reinterpret_cast<const char*>(&x), 4);
      } else {
        const uint16_t b = F32ToBF16Bits(x);
        data.append(reinterpret_cast<const char*>(&b), 2);
      }
    }
    hdr[name] = {{"dtype", t.f32 ? "F32" : "BF16"}, {"shape", shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string h = hdr.dump();
  while ((h.size() + 8) % 8) h.push_back(' ');
  const uint64_t n = h.size();
  std::ofstream out(dir + "/model.safetensors", std::ios::binary);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

// Tests over both architectures (param true: GLM-5 MoE-DSA, false:
// DeepSeek-V3): SetUp writes a tiny checkpoint of that architecture into a
// directory of the test's own (ctest runs tests as parallel processes).
class TinyArchTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    spec_.glm = GetParam();
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::string(MOE_BINARY_DIR) + "/tests/model/tiny_" + (spec_.glm ? "glm" : "dsv3") + "_" +
           info->test_suite_name() + "_" + info->name();
    WriteTinyCheckpoint(dir_, spec_);
  }
  TinySpec spec_;
  std::string dir_;
};

}  // namespace moe::testing
