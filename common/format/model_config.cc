#include "common/format/model_config.h"

#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/base/status.h"

namespace moe {
namespace {

using nlohmann::json;

class Reader {
 public:
  Reader(const json& j, std::string_view source) : j_(j), source_(source) {}

  absl::Status Error(std::string_view field, std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(AV(source_), ": field '", AV(field), "' ", AV(what)));
  }
  bool Has(const char* f) const { return j_.contains(f) && !j_.at(f).is_null(); }

  absl::StatusOr<int64_t> Int(const char* f, std::optional<int64_t> def = std::nullopt) const {
    if (!Has(f)) {
      if (def) return *def;
      return Error(f, "is missing");
    }
    const json& v = j_.at(f);
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {
      double d = v.get<double>();
      if (d == std::floor(d)) return static_cast<int64_t>(d);
    }
    return Error(f, "must be an integer");
  }
  absl::StatusOr<int64_t> PosInt(const char* f, std::optional<int64_t> def = std::nullopt) const {
    MOE_ASSIGN_OR_RETURN(int64_t v, Int(f, def));
    if (v <= 0) return Error(f, absl::StrCat("must be positive, got ", v));
    return v;
  }
  absl::StatusOr<double> Num(const char* f, std::optional<double> def = std::nullopt) const {
    if (!Has(f)) {
      if (def) return *def;
      return Error(f, "is missing");
    }
    const json& v = j_.at(f);
    if (!v.is_number()) return Error(f, "must be a number");
    return v.get<double>();
  }
  absl::StatusOr<bool> Bool(const char* f, bool def) const {
    if (!Has(f)) return def;
    const json& v = j_.at(f);
    if (!v.is_boolean()) return Error(f, "must be true or false");
    return v.get<bool>();
  }
  absl::StatusOr<std::string> Str(const char* f, std::optional<std::string> def = std::nullopt) const {
    if (!Has(f)) {
      if (def) return *def;
      return Error(f, "is missing");
    }
    const json& v = j_.at(f);
    if (!v.is_string()) return Error(f, "must be a string");
    return v.get<std::string>();
  }

 private:
  const json& j_;
  std::string_view source_;
};

#define MOE_CFG_INT(dst, call) \
  do {                         \
    MOE_ASSIGN_OR_RETURN(auto v_, call); \
    dst = v_;                  \
  } while (0)

absl::Status ParseRope(const json& j, const Reader& r, std::string_view source, ModelConfig& c) {
  // rope_parameters (new) or rope_theta + rope_scaling (legacy).
  const json* rp = nullptr;
  if (j.contains("rope_parameters") && !j.at("rope_parameters").is_null()) {
    rp = &j.at("rope_parameters");
  } else if (j.contains("rope_scaling") && !j.at("rope_scaling").is_null()) {
    rp = &j.at("rope_scaling");
  }
  if (rp != nullptr && !rp->is_object()) {
    return r.Error(j.contains("rope_parameters") ? "rope_parameters" : "rope_scaling", "must be an object");
  }
  std::string theta_field = "rope_theta";
  std::optional<double> theta;
  if (rp != nullptr && rp->contains("rope_theta")) {
    if (!rp->at("rope_theta").is_number()) return r.Error("rope_parameters.rope_theta", "must be a number");
    theta = rp->at("rope_theta").get<double>();
    theta_field = "rope_parameters.rope_theta";
  } else if (r.Has("rope_theta")) {
    MOE_ASSIGN_OR_RETURN(theta, r.Num("rope_theta"));
  }
  if (!theta) {
    // HF class defaults: 10000 for deepseek_v3, GLM checkpoints always carry it.
    if (c.arch == ModelArch::kDeepseekV3) {
      theta = 10000.0;
    } else {
      return r.Error("rope_parameters.rope_theta", "is missing");
    }
  }
  if (!(*theta > 1.0)) return r.Error(theta_field, "must be > 1");
  c.rope.theta = *theta;
  if (rp != nullptr) {
    Reader rr(*rp, source);
    std::string type = "default";
    if (rr.Has("rope_type")) {
      MOE_ASSIGN_OR_RETURN(type, rr.Str("rope_type"));
    } else if (rr.Has("type")) {
      MOE_ASSIGN_OR_RETURN(type, rr.Str("type"));
    }
    c.rope.type = type;
    if (type == "yarn") {
      if (!rr.Has("factor")) return r.Error("rope_parameters.factor", "is missing (rope_type yarn)");
      MOE_ASSIGN_OR_RETURN(c.rope.factor, rr.Num("factor"));
      if (!(c.rope.factor > 0)) return r.Error("rope_parameters.factor", "must be > 0");
      if (rr.Has("original_max_position_embeddings")) {
        MOE_ASSIGN_OR_RETURN(c.rope.original_max_position_embeddings, rr.PosInt("original_max_position_embeddings"));
      } else if (r.Has("original_max_position_embeddings")) {
        MOE_ASSIGN_OR_RETURN(c.rope.original_max_position_embeddings, r.PosInt("original_max_position_embeddings"));
      } else {
        c.rope.original_max_position_embeddings = c.max_position_embeddings;
      }
      MOE_ASSIGN_OR_RETURN(c.rope.beta_fast, rr.Num("beta_fast", 32.0));
      MOE_ASSIGN_OR_RETURN(c.rope.beta_slow, rr.Num("beta_slow", 1.0));
      if (c.rope.beta_fast == 0) c.rope.beta_fast = 32.0;  // HF: `or 32`
      if (c.rope.beta_slow == 0) c.rope.beta_slow = 1.0;
      MOE_ASSIGN_OR_RETURN(c.rope.mscale, rr.Num("mscale", 0.0));
      MOE_ASSIGN_OR_RETURN(c.rope.mscale_all_dim, rr.Num("mscale_all_dim", 0.0));
      MOE_ASSIGN_OR_RETURN(c.rope.attention_factor, rr.Num("attention_factor", 0.0));
      MOE_ASSIGN_OR_RETURN(c.rope.truncate, rr.Bool("truncate", true));
    } else if (type != "default") {
      return r.Error("rope_parameters.rope_type", absl::StrCat("'", type, "' is not supported (default, yarn)"));
    }
  }
  return absl::OkStatus();
}

double YarnMscale(double scale, double mscale) {
  if (scale <= 1) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

// HF compute_default_rope_parameters / _compute_yarn_parameters, float32.
void DeriveRope(ModelConfig& c) {
  const int dim = static_cast<int>(c.qk_rope_head_dim);
  const int half = dim / 2;
  c.rope_inv_freq.assign(half, 0.0f);
  const float base = static_cast<float>(c.rope.theta);
  std::vector<float> pos_freqs(half);
  for (int i = 0; i < half; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    pos_freqs[i] = static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(e)));
  }
  c.rope_attention_factor = 1.0f;
  if (c.rope.type != "yarn") {
    for (int i = 0; i < half; ++i) c.rope_inv_freq[i] = 1.0f / pos_freqs[i];
  } else {
    const double factor = c.rope.factor;
    double af = c.rope.attention_factor;
    if (af == 0.0) {
      if (c.rope.mscale != 0.0 && c.rope.mscale_all_dim != 0.0) {
        af = YarnMscale(factor, c.rope.mscale) / YarnMscale(factor, c.rope.mscale_all_dim);
      } else {
        af = YarnMscale(factor, 1.0);
      }
    }
    c.rope_attention_factor = static_cast<float>(af);
    auto corr_dim = [&](double rot) {
      return (dim * std::log(static_cast<double>(c.rope.original_max_position_embeddings) / (rot * 2 * M_PI))) /
             (2 * std::log(c.rope.theta));
    };
    double low = corr_dim(c.rope.beta_fast), high = corr_dim(c.rope.beta_slow);
    if (c.rope.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(dim - 1));
    if (low == high) high += 0.001;
    for (int i = 0; i < half; ++i) {
      const float lin = (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low);
      const float ramp = std::min(std::max(lin, 0.0f), 1.0f);
      const float extra = 1.0f - ramp;
      const float inv_extra = 1.0f / pos_freqs[i];
      const float inv_inter = 1.0f / (static_cast<float>(factor) * pos_freqs[i]);
      c.rope_inv_freq[i] = inv_inter * (1.0f - extra) + inv_extra * extra;
    }
  }
  double scale = 1.0 / std::sqrt(static_cast<double>(c.qk_head_dim()));
  if (c.rope.type != "default" && c.rope.mscale_all_dim != 0.0) {
    const double m = YarnMscale(c.rope.factor, c.rope.mscale_all_dim);
    scale *= m * m;
  }
  c.softmax_scale = scale;
}

absl::Status ParseStringList(const json& j, const Reader& r, const char* field, std::vector<std::string>* out) {
  const json& v = j.at(field);
  if (!v.is_array()) return r.Error(field, "must be a list of strings");
  for (const auto& e : v) {
    if (!e.is_string()) return r.Error(field, "must be a list of strings");
    out->push_back(e.get<std::string>());
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view source) {
  json j = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(AV(source), ": not a JSON object"));
  }
  Reader r(j, source);
  ModelConfig c;
  MOE_ASSIGN_OR_RETURN(c.model_type, r.Str("model_type"));
  if (c.model_type == "glm_moe_dsa") {
    c.arch = ModelArch::kGlmMoeDsa;
  } else if (c.model_type == "deepseek_v3") {
    c.arch = ModelArch::kDeepseekV3;
  } else {
    return r.Error("model_type", absl::StrCat("'", c.model_type, "' is not supported (glm_moe_dsa, deepseek_v3)"));
  }
  const bool glm = c.arch == ModelArch::kGlmMoeDsa;

  MOE_CFG_INT(c.vocab_size, r.PosInt("vocab_size"));
  MOE_CFG_INT(c.hidden_size, r.PosInt("hidden_size"));
  MOE_CFG_INT(c.intermediate_size, r.PosInt("intermediate_size"));
  MOE_CFG_INT(c.moe_intermediate_size, r.PosInt("moe_intermediate_size"));
  MOE_CFG_INT(c.num_hidden_layers, r.PosInt("num_hidden_layers"));
  MOE_CFG_INT(c.num_attention_heads, r.PosInt("num_attention_heads"));
  MOE_CFG_INT(c.num_key_value_heads, r.PosInt("num_key_value_heads", c.num_attention_heads));
  MOE_CFG_INT(c.n_shared_experts, r.Int("n_shared_experts", 1));
  if (c.n_shared_experts < 0) return r.Error("n_shared_experts", "must be >= 0");
  MOE_CFG_INT(c.n_routed_experts, r.PosInt("n_routed_experts"));
  MOE_CFG_INT(c.num_experts_per_tok, r.PosInt("num_experts_per_tok"));
  MOE_CFG_INT(c.n_group, r.PosInt("n_group", glm ? 1 : 8));
  MOE_CFG_INT(c.topk_group, r.PosInt("topk_group", glm ? 1 : 4));
  MOE_CFG_INT(c.norm_topk_prob, r.Bool("norm_topk_prob", true));
  MOE_CFG_INT(c.routed_scaling_factor, r.Num("routed_scaling_factor", 2.5));
  MOE_CFG_INT(c.scoring_func, r.Str("scoring_func", "sigmoid"));
  MOE_CFG_INT(c.topk_method, r.Str("topk_method", "noaux_tc"));
  if (!r.Has("q_lora_rank")) return r.Error("q_lora_rank", "is missing (models without a q LoRA are not supported)");
  MOE_CFG_INT(c.q_lora_rank, r.PosInt("q_lora_rank"));
  MOE_CFG_INT(c.kv_lora_rank, r.PosInt("kv_lora_rank"));
  MOE_CFG_INT(c.qk_nope_head_dim, r.PosInt("qk_nope_head_dim"));
  MOE_CFG_INT(c.qk_rope_head_dim, r.PosInt("qk_rope_head_dim"));
  MOE_CFG_INT(c.v_head_dim, r.PosInt("v_head_dim"));
  MOE_CFG_INT(c.head_dim_unused, r.Int("head_dim", 0));
  MOE_CFG_INT(c.hidden_act, r.Str("hidden_act", "silu"));
  MOE_CFG_INT(c.max_position_embeddings, r.PosInt("max_position_embeddings"));
  MOE_CFG_INT(c.rms_norm_eps, r.Num("rms_norm_eps", glm ? 1e-5 : 1e-6));
  MOE_CFG_INT(c.tie_word_embeddings, r.Bool("tie_word_embeddings", false));
  MOE_CFG_INT(c.first_k_dense_replace, r.Int("first_k_dense_replace", glm ? 3 : 3));
  MOE_CFG_INT(c.moe_layer_freq, r.PosInt("moe_layer_freq", 1));
  MOE_CFG_INT(c.num_nextn_predict_layers, r.Int("num_nextn_predict_layers", 0));
  MOE_CFG_INT(c.moe_router_dtype, r.Str("moe_router_dtype", ""));
  if (r.Has("dtype")) {
    MOE_CFG_INT(c.dtype, r.Str("dtype"));
  } else {
    MOE_CFG_INT(c.dtype, r.Str("torch_dtype", ""));
  }
  MOE_CFG_INT(c.rope_interleave, r.Bool("rope_interleave", true));
  MOE_CFG_INT(c.indexer_rope_interleave, r.Bool("indexer_rope_interleave", true));

  // Consistency.
  if (c.hidden_act != "silu") return r.Error("hidden_act", absl::StrCat("'", c.hidden_act, "' is not supported (silu)"));
  if (c.scoring_func != "sigmoid") {
    return r.Error("scoring_func", absl::StrCat("'", c.scoring_func, "' is not supported (sigmoid)"));
  }
  if (c.topk_method != "noaux_tc") {
    return r.Error("topk_method", absl::StrCat("'", c.topk_method, "' is not supported (noaux_tc)"));
  }
  if (c.qk_rope_head_dim % 2 != 0) return r.Error("qk_rope_head_dim", "must be even");
  if (c.n_routed_experts % c.n_group != 0) return r.Error("n_group", "must divide n_routed_experts");
  if (c.topk_group > c.n_group) return r.Error("topk_group", "must be <= n_group");
  if (c.n_routed_experts / c.n_group < 2) return r.Error("n_group", "needs >= 2 experts per group");
  if (c.num_experts_per_tok > c.topk_group * (c.n_routed_experts / c.n_group)) {
    return r.Error("num_experts_per_tok", "exceeds the experts available in topk_group groups");
  }
  if (!(c.rms_norm_eps > 0)) return r.Error("rms_norm_eps", "must be > 0");
  if (c.first_k_dense_replace < 0) return r.Error("first_k_dense_replace", "must be >= 0");
  if (r.Has("attention_bias")) {
    MOE_ASSIGN_OR_RETURN(bool ab, r.Bool("attention_bias", false));
    if (ab) return r.Error("attention_bias", "true is not supported");
  }

  // Dense / MoE layout.
  c.layer_is_moe.assign(c.num_hidden_layers, false);
  if (r.Has("mlp_layer_types")) {
    std::vector<std::string> types;
    MOE_RETURN_IF_ERROR(ParseStringList(j, r, "mlp_layer_types", &types));
    if (static_cast<int>(types.size()) != c.num_hidden_layers) {
      return r.Error("mlp_layer_types", absl::StrCat("has ", types.size(), " entries, num_hidden_layers is ",
                                                     c.num_hidden_layers));
    }
    for (int i = 0; i < c.num_hidden_layers; ++i) {
      if (types[i] != "dense" && types[i] != "sparse") {
        return r.Error("mlp_layer_types", absl::StrCat("entry ", i, " is '", types[i], "' (dense, sparse)"));
      }
      c.layer_is_moe[i] = types[i] == "sparse";
    }
  } else {
    for (int i = 0; i < c.num_hidden_layers; ++i) {
      c.layer_is_moe[i] = i >= c.first_k_dense_replace && (glm || i % c.moe_layer_freq == 0);
    }
  }

  // Indexer.
  c.has_indexer = glm;
  if (glm) {
    MOE_CFG_INT(c.index_n_heads, r.PosInt("index_n_heads", 32));
    MOE_CFG_INT(c.index_head_dim, r.PosInt("index_head_dim", 128));
    MOE_CFG_INT(c.index_topk, r.PosInt("index_topk", 2048));
    MOE_CFG_INT(c.index_share_for_mtp_iteration, r.Bool("index_share_for_mtp_iteration", false));
    if (c.index_head_dim < c.qk_rope_head_dim) return r.Error("index_head_dim", "must be >= qk_rope_head_dim");
    std::vector<std::string> types;
    if (r.Has("indexer_types")) {
      MOE_RETURN_IF_ERROR(ParseStringList(j, r, "indexer_types", &types));
      if (static_cast<int>(types.size()) != c.num_hidden_layers) {
        return r.Error("indexer_types", absl::StrCat("has ", types.size(), " entries, num_hidden_layers is ",
                                                     c.num_hidden_layers));
      }
    } else if (r.Has("index_topk_pattern")) {
      const json& p = j.at("index_topk_pattern");
      if (p.is_string()) {
        for (char ch : p.get<std::string>()) {
          if (ch == 'F') {
            types.push_back("full");
          } else if (ch == 'S') {
            types.push_back("shared");
          } else {
            return r.Error("index_topk_pattern", "must contain only 'F' and 'S'");
          }
        }
      } else {
        MOE_RETURN_IF_ERROR(ParseStringList(j, r, "index_topk_pattern", &types));
      }
      if (static_cast<int>(types.size()) != c.num_hidden_layers) {
        return r.Error("index_topk_pattern", absl::StrCat("has ", types.size(), " entries, num_hidden_layers is ",
                                                          c.num_hidden_layers));
      }
    } else {
      MOE_ASSIGN_OR_RETURN(int64_t freq, r.Int("index_topk_freq", 1));
      MOE_ASSIGN_OR_RETURN(int64_t offset, r.Int("index_skip_topk_offset", 2));
      freq = std::max<int64_t>(freq, 1);
      for (int i = 0; i < c.num_hidden_layers; ++i) {
        types.push_back(std::max<int64_t>(i - offset + 1, 0) % freq == 0 ? "full" : "shared");
      }
    }
    c.indexer_full.assign(c.num_hidden_layers, false);
    for (int i = 0; i < c.num_hidden_layers; ++i) {
      if (types[i] != "full" && types[i] != "shared") {
        return r.Error("indexer_types", absl::StrCat("entry ", i, " is '", types[i], "' (full, shared)"));
      }
      c.indexer_full[i] = types[i] == "full";
    }
    if (!c.indexer_full[0]) return r.Error("indexer_types", "layer 0 must be 'full' (a shared layer reuses an earlier one)");
  }

  // EOS: int or list; pad.
  if (r.Has("eos_token_id")) {
    const json& e = j.at("eos_token_id");
    if (e.is_number_integer()) {
      c.eos_token_ids.push_back(e.get<int64_t>());
    } else if (e.is_array()) {
      for (const auto& x : e) {
        if (!x.is_number_integer()) return r.Error("eos_token_id", "must be an integer or a list of integers");
        c.eos_token_ids.push_back(x.get<int64_t>());
      }
    } else {
      return r.Error("eos_token_id", "must be an integer or a list of integers");
    }
    for (int64_t id : c.eos_token_ids) {
      if (id < 0 || id >= c.vocab_size) return r.Error("eos_token_id", absl::StrCat(id, " is outside the vocabulary"));
    }
  }
  MOE_CFG_INT(c.pad_token_id, r.Int("pad_token_id", -1));

  // Quantization.
  if (r.Has("quantization_config")) {
    const json& q = j.at("quantization_config");
    if (!q.is_object()) return r.Error("quantization_config", "must be an object");
    Reader qr(q, source);
    MOE_ASSIGN_OR_RETURN(std::string method, qr.Str("quant_method", ""));
    if (method != "fp8") {
      return r.Error("quantization_config.quant_method", absl::StrCat("'", method, "' is not supported (fp8)"));
    }
    c.fp8 = true;
    if (q.contains("weight_block_size")) {
      const json& b = q.at("weight_block_size");
      if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
          b[0].get<int64_t>() <= 0 || b[1].get<int64_t>() <= 0) {
        return r.Error("quantization_config.weight_block_size", "must be two positive integers");
      }
      c.fp8_block_rows = b[0].get<int64_t>();
      c.fp8_block_cols = b[1].get<int64_t>();
    }
  }

  MOE_RETURN_IF_ERROR(ParseRope(j, r, source, c));
  DeriveRope(c);
  return c;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseModelConfig(ss.str(), path);
}

}  // namespace moe
