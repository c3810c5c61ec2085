#include "common/format/tensor_role.h"

#include <charconv>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"

namespace moe {
namespace {

bool Consume(std::string_view* s, std::string_view prefix) {
  if (s->substr(0, prefix.size()) != prefix) return false;
  s->remove_prefix(prefix.size());
  return true;
}

// Parses a decimal integer followed by '.'.
bool ConsumeIndex(std::string_view* s, int* out) {
  const char* b = s->data();
  const char* e = b + s->size();
  auto [p, ec] = std::from_chars(b, e, *out);
  if (ec != std::errc() || p == b || p == e || *p != '.' || *out < 0) return false;
  s->remove_prefix(static_cast<size_t>(p - b) + 1);
  return true;
}

ExpertProj ProjOf(std::string_view s) {
  for (int i = 0; i < 3; ++i) {
    if (s == absl::StrCat(AV(kExpertProjNames[i]), ".weight")) return static_cast<ExpertProj>(i);
  }
  return ExpertProj::kNone;
}

}  // namespace

std::string_view RoleName(TensorRole r) {
  static constexpr std::string_view kNames[kNumTensorRoles] = {
      "experts", "attention", "indexer", "dense_mlp", "shared_experts",
      "embeddings", "lm_head", "norms", "router", "mtp_proj"};
  return kNames[static_cast<int>(r)];
}

std::string_view CensusGroup(const TensorClass& c) { return c.mtp ? "mtp" : RoleName(c.role); }

absl::StatusOr<TensorClass> Classify(std::string_view name, int num_hidden_layers) {
  TensorClass c;
  auto unknown = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown tensor role for '", AV(name),
                     "' (not a glm_moe_dsa / deepseek_v3 tensor name)"));
  };
  if (name == "model.embed_tokens.weight") return TensorClass{TensorRole::kEmbedding};
  if (name == "lm_head.weight") return TensorClass{TensorRole::kLmHead};
  if (name == "model.norm.weight") return TensorClass{TensorRole::kNorm};
  std::string_view s = name;
  if (!Consume(&s, "model.layers.") || !ConsumeIndex(&s, &c.layer)) return unknown();
  c.mtp = c.layer >= num_hidden_layers;
  if (Consume(&s, "mlp.")) {
    int e;
    std::string_view t = s;
    if (Consume(&t, "experts.") && ConsumeIndex(&t, &e)) {
      c.proj = ProjOf(t);
      if (c.proj == ExpertProj::kNone) return unknown();
      c.role = TensorRole::kExpert;
      c.expert = e;
      return c;
    }
    if (Consume(&s, "shared_experts.")) {
      if (ProjOf(s) == ExpertProj::kNone) return unknown();
      c.role = TensorRole::kSharedExpert;
      return c;
    }
    if (s == "gate.weight" || s == "gate.e_score_correction_bias") {
      c.role = TensorRole::kRouter;
      return c;
    }
    if (ProjOf(s) != ExpertProj::kNone) {
      c.role = TensorRole::kDenseMlp;
      return c;
    }
    return unknown();
  }
  if (Consume(&s, "self_attn.")) {
    if (Consume(&s, "indexer.")) {
      if (s == "k_norm.weight" || s == "k_norm.bias") {
        c.role = TensorRole::kNorm;
      } else if (s == "wq_b.weight" || s == "wk.weight" || s == "weights_proj.weight") {
        c.role = TensorRole::kIndexer;
      } else {
        return unknown();
      }
      return c;
    }
    if (s == "q_a_layernorm.weight" || s == "kv_a_layernorm.weight") {
      c.role = TensorRole::kNorm;
      return c;
    }
    for (std::string_view p : {"q_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj",
                               "o_proj"}) {
      if (s == absl::StrCat(AV(p), ".weight")) {
        c.role = TensorRole::kAttention;
        return c;
      }
    }
    return unknown();
  }
  if (s == "input_layernorm.weight" || s == "post_attention_layernorm.weight") {
    c.role = TensorRole::kNorm;
    return c;
  }
  if (c.mtp) {
    if (s == "enorm.weight" || s == "hnorm.weight" || s == "shared_head.norm.weight") {
      c.role = TensorRole::kNorm;
      return c;
    }
    if (s == "eh_proj.weight") {
      c.role = TensorRole::kMtpProj;
      return c;
    }
    if (s == "embed_tokens.weight") {
      c.role = TensorRole::kEmbedding;
      return c;
    }
    if (s == "shared_head.head.weight") {
      c.role = TensorRole::kLmHead;
      return c;
    }
  }
  return unknown();
}

absl::StatusOr<ConvertPolicy> ConvertPolicy::Named(std::string_view name) {
  ConvertPolicy p;
  if (name == "default" || name == "dense-int8") return p;
  if (name == "dense-int4") {
    p.attention = p.dense_mlp = p.shared_experts = QFormat::kQ4G64;
    return p;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--policy: unknown policy '", AV(name), "' (known: default, dense-int8, dense-int4)"));
}

QFormat ConvertPolicy::FormatFor(const TensorClass& c, int ndim) const {
  if (ndim < 2) return QFormat::kF32;
  switch (c.role) {
    case TensorRole::kNorm:
    case TensorRole::kRouter:
      return QFormat::kF32;
    case TensorRole::kEmbedding:
      return embedding;
    case TensorRole::kLmHead:
      return lm_head;
    default:
      break;
  }
  if (c.mtp) return mtp;
  switch (c.role) {
    case TensorRole::kExpert:
      return experts;
    case TensorRole::kAttention:
      return attention;
    case TensorRole::kIndexer:
      return indexer;
    case TensorRole::kDenseMlp:
      return dense_mlp;
    case TensorRole::kSharedExpert:
      return shared_experts;
    default:
      return mtp;
  }
}

std::string ConvertPolicy::ToString() const {
  return absl::StrCat("experts=", AV(Name(experts)), ",attention=", AV(Name(attention)),
                      ",dense_mlp=", AV(Name(dense_mlp)), ",shared_experts=",
                      AV(Name(shared_experts)), ",indexer=", AV(Name(indexer)),
                      ",embedding=", AV(Name(embedding)), ",lm_head=", AV(Name(lm_head)),
                      ",mtp=", AV(Name(mtp)));
}

}  // namespace moe
