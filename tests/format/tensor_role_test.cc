#include "common/format/tensor_role.h"

#include <string>

#include "gtest/gtest.h"

namespace moe {
namespace {

TensorClass C(const std::string& n, int L = 78) {
  auto c = Classify(n, L);
  EXPECT_TRUE(c.ok()) << n << ": " << c.status().message();
  return c.ok() ? *c : TensorClass{};
}

TEST(FormatTensorRoleTest, ClassifiesGlmAndDeepSeekNames) {
  auto e = C("model.layers.77.mlp.experts.255.down_proj.weight");
  EXPECT_EQ(e.role, TensorRole::kExpert);
  EXPECT_EQ(e.layer, 77);
  EXPECT_EQ(e.expert, 255);
  EXPECT_EQ(e.proj, ExpertProj::kDown);
  EXPECT_FALSE(e.mtp);
  EXPECT_TRUE(C("model.layers.78.mlp.experts.0.gate_proj.weight").mtp);
  // "mlp.gate" (router) must not swallow "mlp.gate_proj" (dense MLP).
  EXPECT_EQ(C("model.layers.1.mlp.gate.weight").role, TensorRole::kRouter);
  EXPECT_EQ(C("model.layers.1.mlp.gate.e_score_correction_bias").role, TensorRole::kRouter);
  EXPECT_EQ(C("model.layers.1.mlp.gate_proj.weight").role, TensorRole::kDenseMlp);
  EXPECT_EQ(C("model.layers.9.mlp.shared_experts.up_proj.weight").role, TensorRole::kSharedExpert);
  EXPECT_EQ(C("model.layers.9.self_attn.kv_a_proj_with_mqa.weight").role, TensorRole::kAttention);
  EXPECT_EQ(C("model.layers.9.self_attn.kv_a_layernorm.weight").role, TensorRole::kNorm);
  EXPECT_EQ(C("model.layers.9.self_attn.indexer.weights_proj.weight").role, TensorRole::kIndexer);
  EXPECT_EQ(C("model.layers.9.self_attn.indexer.k_norm.bias").role, TensorRole::kNorm);
  EXPECT_EQ(C("model.layers.78.eh_proj.weight").role, TensorRole::kMtpProj);
  EXPECT_EQ(C("model.layers.61.embed_tokens.weight", 61).role, TensorRole::kEmbedding);
  EXPECT_EQ(C("model.layers.61.shared_head.head.weight", 61).role, TensorRole::kLmHead);
  EXPECT_EQ(C("model.layers.61.shared_head.norm.weight", 61).role, TensorRole::kNorm);
  EXPECT_EQ(C("lm_head.weight").layer, -1);
  EXPECT_EQ(CensusGroup(C("model.layers.78.self_attn.o_proj.weight")), "mtp");
  EXPECT_EQ(CensusGroup(C("model.layers.7.self_attn.o_proj.weight")), "attention");
}

TEST(FormatTensorRoleTest, RejectsUnknownNames) {
  for (const char* n : {"model.layers.1.mlp.experts.3.w1.weight", "model.layers.x.mlp.gate.weight",
                        "model.layers.1.self_attn.indexers_proj.weight", "foo",
                        "model.layers.3.eh_proj.weight" /* not an MTP layer when L = 78 */,
                        "model.layers.-1.input_layernorm.weight"}) {
    auto c = Classify(n, 78);
    ASSERT_FALSE(c.ok()) << n;
    EXPECT_NE(std::string(c.status().message()).find(n), std::string::npos);
  }
}

TEST(FormatTensorRoleTest, PolicyDefaultsAndSwitch) {
  ConvertPolicy p;
  EXPECT_EQ(p.FormatFor(C("model.layers.5.mlp.experts.1.up_proj.weight"), 2), QFormat::kQ4G64);
  EXPECT_EQ(p.FormatFor(C("model.layers.78.mlp.experts.1.up_proj.weight"), 2), QFormat::kQ8G128);
  EXPECT_EQ(p.FormatFor(C("model.layers.5.self_attn.o_proj.weight"), 2), QFormat::kQ8G128);
  EXPECT_EQ(p.FormatFor(C("model.embed_tokens.weight"), 2), QFormat::kQ8Row);
  EXPECT_EQ(p.FormatFor(C("lm_head.weight"), 2), QFormat::kQ8Row);
  EXPECT_EQ(p.FormatFor(C("model.layers.5.mlp.gate.weight"), 2), QFormat::kF32);
  EXPECT_EQ(p.FormatFor(C("model.layers.5.input_layernorm.weight"), 1), QFormat::kF32);
  auto q4 = ConvertPolicy::Named("dense-int4");
  ASSERT_TRUE(q4.ok());
  EXPECT_EQ(q4->FormatFor(C("model.layers.5.self_attn.o_proj.weight"), 2), QFormat::kQ4G64);
  EXPECT_EQ(q4->FormatFor(C("model.layers.78.self_attn.o_proj.weight"), 2), QFormat::kQ8G128);
  EXPECT_FALSE(ConvertPolicy::Named("int3").ok());
  EXPECT_NE(p.ToString(), q4->ToString());
}

}  // namespace
}  // namespace moe
