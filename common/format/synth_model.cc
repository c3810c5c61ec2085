#include "common/format/synth_model.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/format/quantize.h"
#include "common/format/safetensors.h"
#include "common/format/synth_tokenizer.h"
#include "nlohmann/json.hpp"

namespace moe {

// Defined in the generated synth_builtin_configs.cc (models/configs/*.json).
extern const std::vector<std::pair<std::string, std::string>>& SynthBuiltinConfigs();

namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

// ---- deterministic numbers (integers only: the same bytes on every machine) --

uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t NameSeed(uint64_t seed, std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull ^ Mix(seed);
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return Mix(h);
}

struct Rng {
  uint64_t s;
  uint64_t Next() { return Mix(s += 0x9E3779B97F4A7C15ull); }
};

// A sum of four uniform bytes is bell-shaped (Irwin-Hall, |z| <= 3.45) with
// variance 4 * (256^2 - 1) / 12; z = (sum - 510) / std has unit spread.
constexpr int kSums = 1021;
const double kSumStd = std::sqrt(4.0 * (256.0 * 256.0 - 1.0) / 12.0);
double ZOfSum(int sum) { return (sum - 510) / kSumStd; }
inline int SumOf4(uint32_t v) { return int(v & 255) + int((v >> 8) & 255) + int((v >> 16) & 255) + int(v >> 24); }

// FP8 e4m3 codes of 16 * z (|16 z| <= 56, well inside the 448 range): the
// nearest finite code, found by search once.
struct Fp8Table {
  uint8_t code[kSums];
  Fp8Table() {
    for (int s = 0; s < kSums; ++s) {
      const float v = static_cast<float>(16.0 * ZOfSum(s));
      int best = 0;
      float best_d = 1e30f;
      for (int c = 0; c < 256; ++c) {
        if ((c & 0x7f) == 0x7f) continue;  // NaN codes
        const float d = std::fabs(Fp8E4M3ToF32(static_cast<uint8_t>(c)) - v);
        if (d < best_d) best_d = d, best = c;
      }
      code[s] = static_cast<uint8_t>(best);
    }
  }
};
const Fp8Table& Fp8Codes() {
  static const Fp8Table t;
  return t;
}

// ---- the inventory ---------------------------------------------------------

struct Exclusions {
  std::vector<std::string> entries;  // as shipped
  std::vector<std::string> mapped;   // Mapped(entries[i])
  std::vector<bool> matched;
  void Add(std::string e) {
    mapped.push_back(Mapped(e));
    entries.push_back(std::move(e));
    matched.push_back(false);
  }
  static bool Covers(std::string_view e, std::string_view module) {
    return !e.empty() && (module == e || (module.size() > e.size() && module.substr(0, e.size()) == e &&
                                          module[e.size()] == '.'));
  }
  // `module`: the module path of a weight ("...q_a_proj.weight" -> "...q_a_proj").
  bool Excludes(std::string_view module) {
    bool any = false;
    for (size_t i = 0; i < entries.size(); ++i) {
      if (Covers(entries[i], module)) matched[i] = any = true;
      else if (Covers(mapped[i], module)) any = true;  // the mapped name acts, the shipped one stays unmatched
    }
    return any;
  }
  // GLM's list names the indexer's weights_proj "indexers_proj" (MODEL_SPEC
  // section 3); the mapped name is what a loader has to use. Recorded as
  // unmatched anyway when the shipped name itself matches nothing.
  static std::string Mapped(const std::string& e) {
    const std::string bad = "self_attn.indexers_proj";
    const size_t p = e.find(bad);
    if (p == std::string::npos) return "";
    return e.substr(0, p) + "self_attn.indexer.weights_proj" + e.substr(p + bad.size());
  }
};

class Inventory {
 public:
  Inventory(const ModelConfig& c, bool fp8, Exclusions* ex, const SynthOptions& o) : c_(c), fp8_(fp8), ex_(ex), o_(o) {}

  void Vector(const std::string& name, int64_t n, SynthTensor::Fill fill, int layer, DType dt = DType::kBF16) {
    SynthTensor t;
    t.spec = {name, dt, {n}};
    t.fill = fill;
    t.layer = layer;
    t.hole = fill == SynthTensor::Fill::kZeros;
    out.push_back(std::move(t));
  }
  // A linear layer's weight [rows, cols]; `fp8_candidate`: the releases store
  // this kind of matrix in FP8 (unless the exclusion list names it).
  void Matrix(const std::string& name, int64_t rows, int64_t cols, bool fp8_candidate, int layer, int expert = -1,
              double sigma_mul = 1.0) {
    const std::string module = name.substr(0, name.size() - std::string_view(".weight").size());
    const bool excluded = ex_->Excludes(module);  // always evaluated: marks matched entries
    const bool fp8 = fp8_ && fp8_candidate && !excluded;
    const bool hole = expert >= 0 && !o_.real_expert_layers.count(layer);
    SynthTensor t;
    t.spec = {name, fp8 ? DType::kF8E4M3 : DType::kBF16, {rows, cols}};
    t.sigma = sigma_mul / std::sqrt(static_cast<double>(cols));
    t.layer = layer;
    t.expert = expert;
    t.hole = hole;
    out.push_back(t);
    if (fp8) {
      SynthTensor s;
      const int64_t b = kFp8BlockSize;
      s.spec = {name + std::string(kScaleInvSuffix), DType::kF32, {(rows + b - 1) / b, (cols + b - 1) / b}};
      s.fill = SynthTensor::Fill::kFp8Scales;
      s.sigma = t.sigma;
      s.layer = layer;
      s.expert = expert;
      s.hole = hole;
      out.push_back(std::move(s));
      ++fp8_tensors;
    }
  }

  void Layer(int l, bool moe, bool indexer) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    const std::string a = p + "self_attn.";
    const int64_t H = c_.hidden_size, nh = c_.num_attention_heads;
    Matrix(a + "q_a_proj.weight", c_.q_lora_rank, H, true, l);
    Vector(a + "q_a_layernorm.weight", c_.q_lora_rank, SynthTensor::Fill::kOnes, l);
    Matrix(a + "q_b_proj.weight", nh * c_.qk_head_dim(), c_.q_lora_rank, true, l);
    Matrix(a + "kv_a_proj_with_mqa.weight", c_.kv_lora_rank + c_.qk_rope_head_dim, H, true, l);
    Vector(a + "kv_a_layernorm.weight", c_.kv_lora_rank, SynthTensor::Fill::kOnes, l);
    Matrix(a + "kv_b_proj.weight", nh * (c_.qk_nope_head_dim + c_.v_head_dim), c_.kv_lora_rank, true, l);
    Matrix(a + "o_proj.weight", H, nh * c_.v_head_dim, true, l);
    if (indexer) {
      const std::string x = a + "indexer.";
      Matrix(x + "wq_b.weight", c_.index_n_heads * c_.index_head_dim, c_.q_lora_rank, true, l);
      Matrix(x + "wk.weight", c_.index_head_dim, H, true, l);
      Vector(x + "k_norm.weight", c_.index_head_dim, SynthTensor::Fill::kOnes, l);
      Vector(x + "k_norm.bias", c_.index_head_dim, SynthTensor::Fill::kZeros, l);
      Matrix(x + "weights_proj.weight", c_.index_n_heads, H, false, l);
    }
    const std::string m = p + "mlp.";
    if (!moe) {
      Matrix(m + "gate_proj.weight", c_.intermediate_size, H, true, l);
      Matrix(m + "up_proj.weight", c_.intermediate_size, H, true, l);
      Matrix(m + "down_proj.weight", H, c_.intermediate_size, true, l);
    } else {
      // Router rows of unit logit spread on the RMS-normed input.
      Matrix(m + "gate.weight", c_.n_routed_experts, H, false, l);
      Vector(m + "gate.e_score_correction_bias", c_.n_routed_experts, SynthTensor::Fill::kRouterBias, l, DType::kF32);
      const int64_t Im = c_.moe_intermediate_size;
      for (int e = 0; e < c_.n_routed_experts; ++e) {
        const std::string q = absl::StrCat(m, "experts.", e, ".");
        Matrix(q + "gate_proj.weight", Im, H, true, l, e);
        Matrix(q + "up_proj.weight", Im, H, true, l, e);
        Matrix(q + "down_proj.weight", H, Im, true, l, e);
      }
      if (c_.n_shared_experts > 0) {
        const int64_t Is = Im * c_.n_shared_experts;
        Matrix(m + "shared_experts.gate_proj.weight", Is, H, true, l);
        Matrix(m + "shared_experts.up_proj.weight", Is, H, true, l);
        Matrix(m + "shared_experts.down_proj.weight", H, Is, true, l);
      }
    }
    Vector(p + "input_layernorm.weight", H, SynthTensor::Fill::kOnes, l);
    Vector(p + "post_attention_layernorm.weight", H, SynthTensor::Fill::kOnes, l);
  }

  void Build() {
    const int64_t H = c_.hidden_size, V = c_.vocab_size;
    const int L = c_.num_hidden_layers;
    // Embedding rows of unit spread (the residual stream starts there).
    Matrix("model.embed_tokens.weight", V, H, false, -1, -1, std::sqrt(static_cast<double>(H)));
    for (int l = 0; l < L; ++l) Layer(l, c_.layer_is_moe[l], c_.has_indexer && c_.indexer_full[l]);
    if (c_.num_nextn_predict_layers > 0) {
      const std::string p = absl::StrCat("model.layers.", L, ".");
      const bool deepseek = c_.arch == ModelArch::kDeepseekV3;
      // DeepSeek-V3 carries copies of the embedding and head in its MTP layer;
      // GLM-5.x does not (MODEL_SPEC section 3).
      if (deepseek) Matrix(p + "embed_tokens.weight", V, H, false, L, -1, std::sqrt(static_cast<double>(H)));
      Vector(p + "enorm.weight", H, SynthTensor::Fill::kOnes, L);
      Vector(p + "hnorm.weight", H, SynthTensor::Fill::kOnes, L);
      Matrix(p + "eh_proj.weight", H, 2 * H, false, L);
      Vector(p + "shared_head.norm.weight", H, SynthTensor::Fill::kOnes, L);
      if (deepseek) Matrix(p + "shared_head.head.weight", V, H, false, L);
      Layer(L, /*moe=*/true, /*indexer=*/c_.has_indexer);
    }
    Vector("model.norm.weight", H, SynthTensor::Fill::kOnes, -1);
    if (!c_.tie_word_embeddings) Matrix("lm_head.weight", V, H, false, -1);
  }

  std::vector<SynthTensor> out;
  int fp8_tensors = 0;

 private:
  const ModelConfig& c_;
  bool fp8_;
  Exclusions* ex_;
  const SynthOptions& o_;
};

// ---- content ---------------------------------------------------------------

constexpr uint64_t kChunkBytes = 4ull << 20;

// Fills bytes [off, off + n) of tensor t (chunk-aligned: off % kChunkBytes == 0).
void FillChunk(const SynthTensor& t, const ModelConfig& c, uint64_t tensor_seed, uint64_t off, uint64_t n,
               uint8_t* dst) {
  Rng rng{Mix(tensor_seed ^ Mix(off / kChunkBytes + 1))};
  switch (t.fill) {
    case SynthTensor::Fill::kRandom:
      if (t.spec.dtype == DType::kF8E4M3) {
        const uint8_t* code = Fp8Codes().code;
        uint64_t i = 0;
        for (; i + 2 <= n; i += 2) {
          const uint64_t r = rng.Next();
          dst[i] = code[SumOf4(static_cast<uint32_t>(r))];
          dst[i + 1] = code[SumOf4(static_cast<uint32_t>(r >> 32))];
        }
        if (i < n) dst[i] = code[SumOf4(static_cast<uint32_t>(rng.Next()))];
      } else {  // BF16
        for (uint64_t i = 0; i + 2 <= n; i += 2) {
          const float v = static_cast<float>(t.sigma * ZOfSum(SumOf4(static_cast<uint32_t>(rng.Next()))));
          const uint16_t b = F32ToBF16(v);
          std::memcpy(dst + i, &b, 2);
        }
      }
      return;
    case SynthTensor::Fill::kOnes: {
      for (uint64_t i = 0; i + 2 <= n; i += 2) {
        const uint16_t one = 0x3F80;
        std::memcpy(dst + i, &one, 2);
      }
      return;
    }
    case SynthTensor::Fill::kZeros:
      std::memset(dst, 0, n);
      return;
    case SynthTensor::Fill::kRouterBias: {
      // A per-layer permutation of the ranks (Fisher-Yates on the layer's seed).
      const int E = static_cast<int>(t.spec.shape[0]);
      std::vector<int> rank(E);
      std::iota(rank.begin(), rank.end(), 0);
      Rng perm{Mix(tensor_seed ^ 0x5151)};
      for (int i = E - 1; i > 0; --i) std::swap(rank[i], rank[perm.Next() % uint64_t(i + 1)]);
      for (uint64_t i = 0; i + 4 <= n; i += 4) {
        const int e = static_cast<int>((off + i) / 4);
        // ln(1 + r) in float from an integer table-free series is not needed:
        // log1p of small integers is exact enough and rounding to f32 hides
        // any ulp difference of libm (|error| << f32 spacing at these values).
        const float v = static_cast<float>(-kSynthRouterSkew * std::log1p(static_cast<double>(rank[e])));
        std::memcpy(dst + i, &v, 4);
      }
      (void)c;
      return;
    }
    case SynthTensor::Fill::kFp8Scales:
      // Codes carry 16 z; the block scale turns them into sigma * z, with a
      // +-25% block-to-block variation as real scales have.
      for (uint64_t i = 0; i + 4 <= n; i += 4) {
        const double u = static_cast<double>(rng.Next() >> 11) / 9007199254740992.0;  // [0, 1)
        const float v = static_cast<float>(t.sigma / 16.0 * (0.75 + 0.5 * u));
        std::memcpy(dst + i, &v, 4);
      }
      return;
  }
}

absl::Status WriteShardFile(const SynthPlan& plan, int k, const std::string& path, uint64_t seed,
                            const std::function<void(uint64_t)>& advanced) {
  std::vector<TensorSpec> specs;
  for (int i : plan.shards[k]) specs.push_back(plan.tensors[i].spec);
  MOE_ASSIGN_OR_RETURN(SafetensorsFileLayout layout, LayOutSafetensors(specs, {{"format", "pt"}}));
  MOE_ASSIGN_OR_RETURN(auto w, SafetensorsFileWriter::Create(path, std::move(layout)));
  for (size_t j = 0; j < plan.shards[k].size(); ++j) {
    const SynthTensor& t = plan.tensors[plan.shards[k][j]];
    if (t.hole) continue;
    const uint64_t bytes = t.spec.Bytes();
    const uint64_t tseed = NameSeed(seed, t.spec.name);
    const int64_t chunks = static_cast<int64_t>((bytes + kChunkBytes - 1) / kChunkBytes);
    absl::Status err;
#pragma omp parallel if (chunks > 1)
    {
      std::vector<uint8_t> buf(std::min<uint64_t>(bytes, kChunkBytes));
#pragma omp for schedule(dynamic, 1)
      for (int64_t ch = 0; ch < chunks; ++ch) {
        const uint64_t off = static_cast<uint64_t>(ch) * kChunkBytes;
        const uint64_t n = std::min(kChunkBytes, bytes - off);
        FillChunk(t, plan.config, tseed, off, n, buf.data());
        absl::Status s = w->Write(j, off, buf.data(), n);
        if (!s.ok()) {
#pragma omp critical
          if (err.ok()) err = s;
        }
      }
    }
    MOE_RETURN_IF_ERROR(err);
    advanced(bytes);
  }
  return w->Finish();
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

std::string ShardName(int k, int n) {
  char b[64];
  std::snprintf(b, sizeof b, "model-%05d-of-%05d.safetensors", k + 1, n);
  return b;
}

// The copied tokenizer made to name the config's stop ids (synth_tokenizer.h).
absl::StatusOr<int64_t> FitCopiedTokenizer(const std::string& dir, const ModelConfig& config) {
  auto read = [](const fs::path& p, std::string* out) {
    std::ifstream in(p, std::ios::binary);
    if (!in) return false;
    out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    return true;
  };
  std::string tok, cfg;
  if (!read(fs::path(dir) / "tokenizer.json", &tok)) return 0;
  const bool has_cfg = read(fs::path(dir) / "tokenizer_config.json", &cfg);
  auto offset = FitTokenizerIds(&tok, has_cfg ? &cfg : nullptr, config.vocab_size, config.eos_token_ids);
  if (!offset.ok()) return Annotate(offset.status(), "--tokenizer: fitting its ids to the config");
  if (*offset == 0) return 0;
  MOE_RETURN_IF_ERROR(WriteText(dir + "/tokenizer.json", tok));
  if (has_cfg) MOE_RETURN_IF_ERROR(WriteText(dir + "/tokenizer_config.json", cfg));
  return *offset;
}

// Side files: config, generation config, synth.json, tokenizer, index.
absl::Status WriteSideFiles(const SynthPlan& plan, const SynthOptions& o, const std::string& dir) {
  MOE_RETURN_IF_ERROR(WriteText(dir + "/config.json", plan.config_json));
  ordered_json g = {{"_from_model_config", true}};
  g["eos_token_id"] = plan.config.eos_token_ids;
  if (plan.config.pad_token_id >= 0) g["pad_token_id"] = plan.config.pad_token_id;
  g["temperature"] = 1.0;
  g["top_p"] = 0.95;
  MOE_RETURN_IF_ERROR(WriteText(dir + "/generation_config.json", g.dump(2) + "\n"));
  int64_t tokenizer_offset = 0;  // FitTokenizerIds: the donor tokenizer's added tokens moved by this
  if (!o.tokenizer_dir.empty()) {
    bool any = false;
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json"}) {
      const fs::path src = fs::path(o.tokenizer_dir) / f;
      std::error_code ec;
      if (!fs::exists(src, ec)) continue;
      fs::copy_file(src, fs::path(dir) / f, fs::copy_options::overwrite_existing, ec);
      if (ec) return absl::UnavailableError(absl::StrCat("copy ", src.string(), ": ", ec.message()));
      any = true;
    }
    if (!any) return absl::NotFoundError(absl::StrCat("--tokenizer ", o.tokenizer_dir, ": no tokenizer.json"));
    MOE_ASSIGN_OR_RETURN(tokenizer_offset, FitCopiedTokenizer(dir, plan.config));
  }
  std::vector<int> real(o.real_expert_layers.begin(), o.real_expert_layers.end());
  ordered_json s = {{"kind", "moestream-synth-checkpoint"},
                    {"version", 1},
                    {"seed", o.seed},
                    {"real_expert_layers", real},
                    {"router_skew", kSynthRouterSkew},
                    {"shards", plan.shard_files.size()},
                    {"total_bytes", plan.total_bytes},
                    {"written_bytes", plan.written_bytes},
                    {"unmatched_exclusions", plan.unmatched_exclusions},
                    {"tokenizer_id_offset", tokenizer_offset}};
  MOE_RETURN_IF_ERROR(WriteText(dir + "/synth.json", s.dump(2) + "\n"));
  std::map<std::string, std::string> weight_map;
  for (size_t k = 0; k < plan.shards.size(); ++k)
    for (int i : plan.shards[k]) weight_map[plan.tensors[i].spec.name] = plan.shard_files[k];
  return WriteText(dir + "/" + std::string(kIndexFileName), SafetensorsIndexJson(plan.total_bytes, weight_map));
}

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::vector<std::string> BuiltinConfigNames() {
  std::vector<std::string> v;
  for (const auto& [name, text] : SynthBuiltinConfigs()) v.push_back(name);
  return v;
}

absl::StatusOr<std::string> BuiltinConfig(std::string_view name) {
  std::string known;
  for (const auto& [n, text] : SynthBuiltinConfigs()) {
    if (n == name) return text;
    absl::StrAppend(&known, known.empty() ? "" : ", ", n);
  }
  return absl::NotFoundError(absl::StrCat("no built-in config '", AV(name), "' (known: ", known, ")"));
}

absl::StatusOr<std::string> ApplyConfigOverrides(std::string_view config_json,
                                                 const std::vector<std::pair<std::string, std::string>>& overrides) {
  ordered_json j = ordered_json::parse(config_json.begin(), config_json.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError("config: not a JSON object");
  const int old_layers = j.value("num_hidden_layers", 0);
  for (const auto& [key, value] : overrides) {
    if (key.empty()) return absl::InvalidArgumentError("--set: empty key");
    ordered_json v = ordered_json::parse(value, nullptr, false);
    j[key] = v.is_discarded() ? ordered_json(value) : v;
  }
  const int L = j.value("num_hidden_layers", 0);
  if (L != old_layers && L > 0) {
    for (const char* list : {"mlp_layer_types", "indexer_types", "layer_types"}) {
      if (!j.contains(list) || !j[list].is_array()) continue;
      bool set = false;
      for (const auto& [key, value] : overrides) set |= key == list;
      if (set) continue;
      if (static_cast<int>(j[list].size()) < L) {
        return absl::InvalidArgumentError(absl::StrCat("--set num_hidden_layers=", L, ": the config's ", list,
                                                       " has only ", j[list].size(), " entries; set it too"));
      }
      ordered_json cut = ordered_json::array();
      for (int i = 0; i < L; ++i) cut.push_back(j[list][i]);
      j[list] = cut;
    }
    // Per-layer exclusion entries: layers < L stay, the old MTP layer's
    // entries move to the new MTP index L, the cut layers' go.
    if (j.contains("quantization_config") && j["quantization_config"].contains("modules_to_not_convert")) {
      ordered_json kept = ordered_json::array();
      const std::string pre = "model.layers.";
      for (const auto& e : j["quantization_config"]["modules_to_not_convert"]) {
        const std::string s = e.is_string() ? e.get<std::string>() : "";
        if (s.rfind(pre, 0) != 0) {
          kept.push_back(e);
          continue;
        }
        size_t end = pre.size();
        while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end]))) ++end;
        if (end == pre.size()) {
          kept.push_back(e);
          continue;
        }
        const int l = std::stoi(s.substr(pre.size(), end - pre.size()));
        if (l < L) {
          kept.push_back(e);
        } else if (l >= old_layers) {
          kept.push_back(absl::StrCat(pre, L + (l - old_layers), s.substr(end)));
        }
      }
      j["quantization_config"]["modules_to_not_convert"] = kept;
    }
  }
  return j.dump(2) + "\n";
}

absl::StatusOr<SynthPlan> PlanSynthCheckpoint(std::string_view config_json, const SynthOptions& o) {
  SynthPlan plan;
  plan.config_json = std::string(config_json);
  MOE_ASSIGN_OR_RETURN(plan.config, ParseModelConfig(config_json, "config.json"));
  const ModelConfig& c = plan.config;
  if (c.num_nextn_predict_layers > 1)
    return absl::InvalidArgumentError("num_nextn_predict_layers > 1 is not supported (the releases have 1)");
  for (int l : o.real_expert_layers) {
    const bool moe_layer = (l < c.num_hidden_layers && l >= 0 && c.layer_is_moe[l]) ||
                           (l == c.num_hidden_layers && c.num_nextn_predict_layers > 0);
    if (!moe_layer)
      return absl::InvalidArgumentError(absl::StrCat("--real-expert-layers: layer ", l, " is not a MoE layer of this ",
                                                     "model (MoE layers: ", c.first_k_dense_replace, "..",
                                                     c.num_hidden_layers - 1,
                                                     c.num_nextn_predict_layers ? absl::StrCat(" and MTP ", c.num_hidden_layers) : "",
                                                     ")"));
  }
  Exclusions ex;
  const ordered_json j = ordered_json::parse(config_json.begin(), config_json.end(), nullptr, false);
  if (c.fp8 && j.contains("quantization_config")) {
    const auto& q = j["quantization_config"];
    if (q.contains("modules_to_not_convert") && q["modules_to_not_convert"].is_array()) {
      for (const auto& e : q["modules_to_not_convert"]) {
        if (!e.is_string())
          return absl::InvalidArgumentError("config.json: quantization_config.modules_to_not_convert must hold strings");
        ex.Add(e.get<std::string>());
      }
    }
  }
  if (c.fp8 && (c.fp8_block_rows != kFp8BlockSize || c.fp8_block_cols != kFp8BlockSize))
    return absl::InvalidArgumentError("quantization_config.weight_block_size: only [128, 128] is supported");
  Inventory inv(c, c.fp8, &ex, o);
  inv.Build();
  plan.tensors = std::move(inv.out);
  plan.fp8_tensors = inv.fp8_tensors;
  for (size_t i = 0; i < ex.entries.size(); ++i) {
    // An entry "matches" a tensor if some tensor's module is it or below it.
    if (!ex.matched[i]) {
      bool any = false;
      for (const auto& t : plan.tensors) {
        const std::string& n = t.spec.name;
        const std::string& e = ex.entries[i];
        any |= n.size() > e.size() && n.compare(0, e.size(), e) == 0 && n[e.size()] == '.';
        if (any) break;
      }
      if (!any) plan.unmatched_exclusions.push_back(ex.entries[i]);
    }
  }
  // Shards: tensors in order, a new shard when the next would pass the limit.
  uint64_t in_shard = 0;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const uint64_t b = plan.tensors[i].spec.Bytes();
    if (plan.shards.empty() || (in_shard > 0 && in_shard + b > o.max_shard_bytes)) {
      plan.shards.emplace_back();
      in_shard = 0;
    }
    plan.shards.back().push_back(static_cast<int>(i));
    in_shard += b;
    plan.total_bytes += b;
    if (!plan.tensors[i].hole) plan.written_bytes += b;
  }
  const int n = static_cast<int>(plan.shards.size());
  for (int k = 0; k < n; ++k) plan.shard_files.push_back(ShardName(k, n));
  return plan;
}

absl::StatusOr<SynthResult> SynthesizeCheckpoint(const SynthPlan& plan, const SynthOptions& o,
                                                 const std::string& out_dir,
                                                 const std::function<void(const SynthProgress&)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", out_dir, ": ", ec.message()));
  MOE_RETURN_IF_ERROR(WriteSideFiles(plan, o, out_dir));
  SynthProgress p;
  p.bytes_total = plan.written_bytes;
  p.num_shards = static_cast<int>(plan.shards.size());
  for (int k = 0; k < p.num_shards; ++k) {
    p.shard = k + 1;
    MOE_RETURN_IF_ERROR(WriteShardFile(plan, k, out_dir + "/" + plan.shard_files[k], o.seed, [&](uint64_t b) {
      p.bytes_done += b;
      p.elapsed_s = Since(t0);
      if (progress) progress(p);
    }));
  }
  SynthResult r;
  r.shards = p.num_shards;
  r.total_bytes = plan.total_bytes;
  r.written_bytes = plan.written_bytes;
  r.seconds = Since(t0);
  return r;
}

absl::StatusOr<SynthResult> SynthesizeContainer(const SynthPlan& plan, const SynthOptions& o, ConvertOptions convert,
                                                std::string work_dir) {
  const auto t0 = std::chrono::steady_clock::now();
  if (work_dir.empty()) work_dir = convert.out_dir + "/.synth-checkpoint";
  std::error_code ec;
  fs::create_directories(work_dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", work_dir, ": ", ec.message()));
  const bool fresh = !fs::exists(fs::path(convert.out_dir) / std::string(kPlanFileName), ec);
  MOE_RETURN_IF_ERROR(WriteSideFiles(plan, o, work_dir));
  std::map<std::string, int> shard_of;
  for (int k = 0; k < static_cast<int>(plan.shard_files.size()); ++k) shard_of[plan.shard_files[k]] = k;
  if (fresh) {
    // The converter plans from every input header at once: write all shards
    // header-first as files of holes; their data comes just in time below.
    for (size_t k = 0; k < plan.shards.size(); ++k) {
      std::vector<TensorSpec> specs;
      for (int i : plan.shards[k]) specs.push_back(plan.tensors[i].spec);
      MOE_ASSIGN_OR_RETURN(SafetensorsFileLayout layout, LayOutSafetensors(specs, {{"format", "pt"}}));
      MOE_ASSIGN_OR_RETURN(auto w, SafetensorsFileWriter::Create(work_dir + "/" + plan.shard_files[k], std::move(layout)));
      MOE_RETURN_IF_ERROR(w->Finish());
    }
  }
  std::set<int> filled;
  convert.in_dir = work_dir;
  convert.delete_source = true;
  convert.prepare_inputs = [&](const std::vector<std::string>& inputs) -> absl::Status {
    for (const std::string& f : inputs) {
      auto it = shard_of.find(f);
      if (it == shard_of.end()) return absl::InternalError(absl::StrCat("synth: the plan reads unknown input ", f));
      if (!filled.insert(it->second).second) continue;
      MOE_RETURN_IF_ERROR(WriteShardFile(plan, it->second, work_dir + "/" + f, o.seed, [](uint64_t) {}));
    }
    return absl::OkStatus();
  };
  SynthResult r;
  MOE_ASSIGN_OR_RETURN(r.convert, ConvertCheckpoint(convert));
  if (r.convert.complete) fs::remove_all(work_dir, ec);
  r.shards = static_cast<int>(plan.shards.size());
  r.total_bytes = plan.total_bytes;
  r.written_bytes = plan.written_bytes;
  r.seconds = Since(t0);
  return r;
}

}  // namespace moe
