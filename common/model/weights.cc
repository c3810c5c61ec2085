#include "common/model/weights.h"

#include <cstring>
#include <filesystem>
#include <functional>

#include "common/base/status.h"
#include "common/format/quantize.h"
#include "common/format/dtype.h"
#include "common/format/qformat.h"
#include "common/format/tensor_role.h"
#include "common/model/bf16.h"

namespace moe {
namespace {

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) absl::StrAppend(&r, i ? ", " : "", s[i]);
  return r + "]";
}

absl::StatusOr<const TensorInfo*> Need(const SafetensorsReader& ck, const std::string& name,
                                       const std::vector<int64_t>& shape) {
  const TensorInfo* t = ck.Find(name);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat(ck.path(), ": tensor '", name, "' is missing"));
  if (t->shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat(ck.path(), ": tensor '", name, "' has shape ", ShapeStr(t->shape),
                                                   ", config expects ", ShapeStr(shape)));
  }
  return t;
}

// The format a checkpoint tensor has once loaded: bf16 and FP8 (dequantized)
// become bf16, every other float dtype f32 (MakeMatrix below does this).
QFormat LoadedFormat(const TensorInfo& t, bool force_f32) {
  if (force_f32) return QFormat::kF32;
  return (t.dtype == DType::kBF16 || t.dtype == DType::kF8E4M3) ? QFormat::kBF16 : QFormat::kF32;
}
QFormat LoadedFormat(const ContainerTensor& t, bool force_f32) { return force_f32 ? QFormat::kF32 : t.format; }

// Builds a matrix from `rows` x `cols` elements of `t` starting at element
// `offset`. Keeps bf16/f32 as stored unless `force_f32`; FP8 is dequantized
// with its block scales (`scale`, may be null for non-FP8) to bf16. All reads
// and decoding go through common/format (SafetensorsReader, dtype.h).
absl::StatusOr<OwnedMatrix> MakeMatrix(const SafetensorsReader& ck, const ModelConfig& c, const TensorInfo& t,
                                       int64_t offset, int64_t rows, int64_t cols, const TensorInfo* scale,
                                       bool force_f32) {
  OwnedMatrix m;
  m.m.rows = rows;
  m.m.cols = cols;
  const int64_t n = rows * cols;
  const int64_t es = DTypeSize(t.dtype);
  if (t.dtype == DType::kBF16 && !force_f32) {
    m.m.format = QFormat::kBF16;
    m.data.resize(n * 2);
    MOE_RETURN_IF_ERROR(Annotate(ck.ReadRange(t.file, t.offset + offset * 2, n * 2, m.data.data()), t.name));
  } else if (t.dtype == DType::kF8E4M3) {
    if (scale == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' is FP8 but has no weight_scale_inv"));
    }
    const int64_t br = c.fp8_block_rows, bc = c.fp8_block_cols;
    const int64_t srows = (rows + br - 1) / br, scols = (cols + bc - 1) / bc;
    if (scale->shape != std::vector<int64_t>{srows, scols} || scale->dtype != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", scale->name, "' must be F32 ", ShapeStr({srows, scols})));
    }
    if (offset != 0 || t.numel() != n || br != kFp8BlockSize || bc != kFp8BlockSize) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "': FP8 needs a whole 2-D tensor with ",
                                                     kFp8BlockSize, "x", kFp8BlockSize, " block scales"));
    }
    // W[r, c] = float(q[r, c]) * S[r / 128, c / 128] in f32 (the reader's dequantization).
    std::vector<float> w(n);
    MOE_RETURN_IF_ERROR(Annotate(ck.ReadTensorF32(t, w.data()), t.name));
    m.m.format = LoadedFormat(t, force_f32);
    m.data.resize(n * (force_f32 ? 4 : 2));
    if (force_f32) {
      std::memcpy(m.data.data(), w.data(), n * 4);
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t b = F32ToBf16(w[i]);
        std::memcpy(m.data.data() + i * 2, &b, 2);
      }
    }
  } else {
    if (!DTypeIsFloat(t.dtype)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' has non-float dtype ", AV(DTypeName(t.dtype))));
    }
    m.m.format = QFormat::kF32;
    m.data.resize(n * 4);
    std::vector<uint8_t> raw(n * es);
    MOE_RETURN_IF_ERROR(Annotate(ck.ReadRange(t.file, t.offset + offset * es, n * es, raw.data()), t.name));
    DecodeToF32(t.dtype, raw.data(), n, reinterpret_cast<float*>(m.data.data()));
  }
  m.m.data = m.data.data();
  return m;
}

absl::StatusOr<OwnedMatrix> LoadMatrix(const SafetensorsReader& ck, const ModelConfig& c, const std::string& name,
                                       int64_t rows, int64_t cols, bool force_f32 = false) {
  MOE_ASSIGN_OR_RETURN(const TensorInfo* t, Need(ck, name, {rows, cols}));
  const TensorInfo* scale = ck.ScaleOf(*t);
  return MakeMatrix(ck, c, *t, 0, rows, cols, scale, force_f32);
}

absl::StatusOr<std::vector<float>> LoadVector(const SafetensorsReader& ck, const std::string& name, int64_t n) {
  MOE_ASSIGN_OR_RETURN(const TensorInfo* t, Need(ck, name, {n}));
  std::vector<float> v(n);
  MOE_RETURN_IF_ERROR(Annotate(ck.ReadTensorF32(*t, v.data()), name));
  return v;
}

// ---- converted container (docs/CONTAINER.md): matrices keep their stored
// QFormat and go through the kernels as is. ----

absl::StatusOr<const ContainerTensor*> Need(const Container& ck, const std::string& name,
                                            const std::vector<int64_t>& shape) {
  const ContainerTensor* t = ck.Find(name);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat("container: tensor '", name, "' is missing"));
  if (t->shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat("container: tensor '", name, "' has shape ", ShapeStr(t->shape),
                                                   ", config expects ", ShapeStr(shape)));
  }
  return t;
}

absl::StatusOr<OwnedMatrix> LoadMatrix(const Container& ck, const ModelConfig& c, const std::string& name,
                                       int64_t rows, int64_t cols, bool force_f32 = false) {
  MOE_ASSIGN_OR_RETURN(const ContainerTensor* t, Need(ck, name, {rows, cols}));
  OwnedMatrix m;
  m.m.rows = rows;
  m.m.cols = cols;
  if (force_f32 && t->format != QFormat::kF32) {
    MOE_ASSIGN_OR_RETURN(std::vector<float> w, ck.ReadTensorF32(*t));
    m.m.format = QFormat::kF32;
    m.data.resize(w.size() * 4);
    std::memcpy(m.data.data(), w.data(), m.data.size());
    m.m.data = m.data.data();
    return m;
  }
  // Used as stored: point into the shared mapping of the shard (no copy; every
  // worker process shares the same page-cache pages).
  m.m.format = t->format;
  MOE_ASSIGN_OR_RETURN(Container::MappedTensor mt, ck.MapTensor(*t));  // errors name the tensor
  m.m.data = mt.data;
  m.m.scales = mt.scales;
  m.mapping = std::move(mt.keep);
  return m;
}

absl::StatusOr<std::vector<float>> LoadVector(const Container& ck, const std::string& name, int64_t n) {
  MOE_ASSIGN_OR_RETURN(const ContainerTensor* t, Need(ck, name, {n}));
  MOE_ASSIGN_OR_RETURN(std::vector<float> v, ck.ReadTensorF32(*t));
  if (static_cast<int64_t>(v.size()) != n) return absl::DataLossError(absl::StrCat("container: tensor '", name, "' size"));
  return v;
}

// The memory plan walks the loader itself (LoadResidentImpl below) over this
// source: every tensor is looked up and shape-checked as for loading, and
// matrices come back with the format and shape they would be loaded with but
// no data, so the plan counts exactly what loading would allocate.
template <class Src>
struct SizingSource {
  const Src& src;
  std::vector<PlannedTensor>* parts = nullptr;  // optional: every tensor the loader takes
  auto Find(std::string_view name) const { return src.Find(name); }
};

// A container tensor used as stored is mapped (shared page cache); anything
// converted at load, and every checkpoint tensor, is a private copy.
bool MappedAtLoad(const ContainerTensor& t, bool force_f32) { return !force_f32 || t.format == QFormat::kF32; }
bool MappedAtLoad(const TensorInfo&, bool) { return false; }

template <class Src>
absl::StatusOr<OwnedMatrix> LoadMatrix(const SizingSource<Src>& s, const ModelConfig& c, const std::string& name,
                                       int64_t rows, int64_t cols, bool force_f32 = false) {
  MOE_ASSIGN_OR_RETURN(const auto* t, Need(s.src, name, {rows, cols}));
  OwnedMatrix m;
  m.m.rows = rows;
  m.m.cols = cols;
  m.m.format = LoadedFormat(*t, force_f32);
  if (s.parts) s.parts->push_back({name, m.m.format, rows, cols, m.Bytes(), MappedAtLoad(*t, force_f32)});
  return m;
}

template <class Src>
absl::StatusOr<std::vector<float>> LoadVector(const SizingSource<Src>& s, const std::string& name, int64_t n) {
  MOE_RETURN_IF_ERROR(Need(s.src, name, {n}).status());
  if (s.parts) s.parts->push_back({name, QFormat::kF32, 1, n, 4 * n, false});
  return std::vector<float>(n);
}

template <class Src>
absl::Status LoadLayer(const Src& ck, const ModelConfig& c, int l, bool moe, bool indexer,
                       LayerWeights& w) {
  const std::string p = absl::StrCat("model.layers.", l, ".");
  const int64_t H = c.hidden_size, nh = c.num_attention_heads;
  w.index = l;
  MOE_ASSIGN_OR_RETURN(w.input_norm, LoadVector(ck, p + "input_layernorm.weight", H));
  MOE_ASSIGN_OR_RETURN(w.post_norm, LoadVector(ck, p + "post_attention_layernorm.weight", H));
  const std::string a = p + "self_attn.";
  MOE_ASSIGN_OR_RETURN(w.q_a, LoadMatrix(ck, c, a + "q_a_proj.weight", c.q_lora_rank, H));
  MOE_ASSIGN_OR_RETURN(w.q_a_norm, LoadVector(ck, a + "q_a_layernorm.weight", c.q_lora_rank));
  MOE_ASSIGN_OR_RETURN(w.q_b, LoadMatrix(ck, c, a + "q_b_proj.weight", nh * c.qk_head_dim(), c.q_lora_rank));
  MOE_ASSIGN_OR_RETURN(w.kv_a, LoadMatrix(ck, c, a + "kv_a_proj_with_mqa.weight", c.kv_lora_rank + c.qk_rope_head_dim, H));
  MOE_ASSIGN_OR_RETURN(w.kv_a_norm, LoadVector(ck, a + "kv_a_layernorm.weight", c.kv_lora_rank));
  MOE_ASSIGN_OR_RETURN(w.kv_b, LoadMatrix(ck, c, a + "kv_b_proj.weight", nh * (c.qk_nope_head_dim + c.v_head_dim),
                                          c.kv_lora_rank));
  MOE_ASSIGN_OR_RETURN(w.o, LoadMatrix(ck, c, a + "o_proj.weight", H, nh * c.v_head_dim));
  w.has_indexer = indexer;
  if (indexer) {
    const std::string x = a + "indexer.";
    MOE_ASSIGN_OR_RETURN(w.idx_wq_b, LoadMatrix(ck, c, x + "wq_b.weight", c.index_n_heads * c.index_head_dim, c.q_lora_rank));
    MOE_ASSIGN_OR_RETURN(w.idx_wk, LoadMatrix(ck, c, x + "wk.weight", c.index_head_dim, H));
    MOE_ASSIGN_OR_RETURN(w.idx_k_norm_w, LoadVector(ck, x + "k_norm.weight", c.index_head_dim));
    MOE_ASSIGN_OR_RETURN(w.idx_k_norm_b, LoadVector(ck, x + "k_norm.bias", c.index_head_dim));
    MOE_ASSIGN_OR_RETURN(w.idx_wp, LoadMatrix(ck, c, x + "weights_proj.weight", c.index_n_heads, H, /*force_f32=*/true));
  }
  w.moe = moe;
  const std::string m = p + "mlp.";
  if (!moe) {
    MOE_ASSIGN_OR_RETURN(w.gate, LoadMatrix(ck, c, m + "gate_proj.weight", c.intermediate_size, H));
    MOE_ASSIGN_OR_RETURN(w.up, LoadMatrix(ck, c, m + "up_proj.weight", c.intermediate_size, H));
    MOE_ASSIGN_OR_RETURN(w.down, LoadMatrix(ck, c, m + "down_proj.weight", H, c.intermediate_size));
  } else {
    MOE_ASSIGN_OR_RETURN(w.router, LoadMatrix(ck, c, m + "gate.weight", c.n_routed_experts, H, /*force_f32=*/true));
    MOE_ASSIGN_OR_RETURN(w.router_bias, LoadVector(ck, m + "gate.e_score_correction_bias", c.n_routed_experts));
    w.has_shared = c.n_shared_experts > 0;
    if (w.has_shared) {
      const int64_t Is = c.moe_intermediate_size * c.n_shared_experts;
      MOE_ASSIGN_OR_RETURN(w.sh_gate, LoadMatrix(ck, c, m + "shared_experts.gate_proj.weight", Is, H));
      MOE_ASSIGN_OR_RETURN(w.sh_up, LoadMatrix(ck, c, m + "shared_experts.up_proj.weight", Is, H));
      MOE_ASSIGN_OR_RETURN(w.sh_down, LoadMatrix(ck, c, m + "shared_experts.down_proj.weight", H, Is));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsReader>> OpenCheckpoint(const std::string& dir) {
  OpenOptions o;
  o.direct_io = false;
  // A directory without an index may hold other *.safetensors files (e.g.
  // debug.safetensors next to an oracle checkpoint): open only the model's.
  std::error_code ec;
  if (std::filesystem::is_directory(dir, ec) &&
      !std::filesystem::exists(std::filesystem::path(dir) / kIndexFileName, ec) &&
      std::filesystem::exists(std::filesystem::path(dir) / "model.safetensors", ec)) {
    return SafetensorsReader::Open((std::filesystem::path(dir) / "model.safetensors").string(), o);
  }
  return SafetensorsReader::Open(dir, o);
}

int64_t LayerWeights::Bytes() const {
  int64_t b = 4 * static_cast<int64_t>(input_norm.size() + post_norm.size() + q_a_norm.size() + kv_a_norm.size() +
                                       idx_k_norm_w.size() + idx_k_norm_b.size() + router_bias.size());
  for (const OwnedMatrix* m : {&q_a, &q_b, &kv_a, &kv_b, &o, &idx_wq_b, &idx_wk, &idx_wp, &gate, &up, &down, &router,
                               &sh_gate, &sh_up, &sh_down}) {
    b += m->Bytes();
  }
  return b;
}

int64_t ModelWeights::Bytes() const {
  int64_t b = embed.Bytes() + lm_head.Bytes() + 4 * static_cast<int64_t>(final_norm.size());
  for (const auto& l : layers) b += l.Bytes();
  if (mtp) b += mtp->layer.Bytes() + mtp->eh_proj.Bytes() + 12 * static_cast<int64_t>(mtp->enorm.size());
  return b;
}

template <class Src>
absl::StatusOr<std::unique_ptr<ModelWeights>> LoadResidentImpl(const Src& ck, const ModelConfig& c,
                                                                   const LoadOptions& opt) {
  auto w = std::make_unique<ModelWeights>();
  const int64_t H = c.hidden_size, V = c.vocab_size;
  MOE_ASSIGN_OR_RETURN(w->embed, LoadMatrix(ck, c, "model.embed_tokens.weight", V, H));
  if (ck.Find("lm_head.weight") == nullptr && c.tie_word_embeddings) {
    MOE_ASSIGN_OR_RETURN(w->lm_head, LoadMatrix(ck, c, "model.embed_tokens.weight", V, H));
  } else {
    MOE_ASSIGN_OR_RETURN(w->lm_head, LoadMatrix(ck, c, "lm_head.weight", V, H));
  }
  MOE_ASSIGN_OR_RETURN(w->final_norm, LoadVector(ck, "model.norm.weight", H));
  w->layers.resize(c.num_hidden_layers);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    MOE_RETURN_IF_ERROR(LoadLayer(ck, c, l, c.layer_is_moe[l], c.has_indexer && c.indexer_full[l], w->layers[l]));
  }
  const int L = c.num_hidden_layers;
  const std::string p = absl::StrCat("model.layers.", L, ".");
  if (opt.load_mtp && ck.Find(p + "eh_proj.weight") != nullptr) {
    auto m = std::make_unique<MtpWeights>();
    MOE_ASSIGN_OR_RETURN(m->enorm, LoadVector(ck, p + "enorm.weight", H));
    MOE_ASSIGN_OR_RETURN(m->hnorm, LoadVector(ck, p + "hnorm.weight", H));
    MOE_ASSIGN_OR_RETURN(m->shared_head_norm, LoadVector(ck, p + "shared_head.norm.weight", H));
    MOE_ASSIGN_OR_RETURN(m->eh_proj, LoadMatrix(ck, c, p + "eh_proj.weight", H, 2 * H));
    MOE_RETURN_IF_ERROR(LoadLayer(ck, c, L, /*moe=*/true, c.has_indexer, m->layer));
    w->mtp = std::move(m);
  }
  return w;
}

absl::StatusOr<std::unique_ptr<ModelWeights>> LoadResidentWeights(const SafetensorsReader& ck, const ModelConfig& c,
                                                                   const LoadOptions& opt) {
  return LoadResidentImpl(ck, c, opt);
}

absl::StatusOr<std::unique_ptr<ModelWeights>> LoadResidentWeights(const Container& ck, const ModelConfig& c,
                                                                   const LoadOptions& opt) {
  return LoadResidentImpl(ck, c, opt);
}

namespace {

// The matrices RequantizeDense re-stores (not embeddings, lm_head, the router
// or the indexer's weights_proj, which stay as loaded); the plan uses the same list.
absl::Status ForEachRequantizable(ModelWeights& w,
                                  const std::function<absl::Status(OwnedMatrix&, const std::string&)>& fn) {
  auto layer = [&](LayerWeights& l) -> absl::Status {
    const std::string what = absl::StrCat("layer ", l.index);
    for (OwnedMatrix* m : {&l.q_a, &l.q_b, &l.kv_a, &l.kv_b, &l.o, &l.idx_wq_b, &l.idx_wk, &l.gate, &l.up, &l.down,
                           &l.sh_gate, &l.sh_up, &l.sh_down}) {
      MOE_RETURN_IF_ERROR(fn(*m, what));
    }
    return absl::OkStatus();
  };
  for (auto& l : w.layers) MOE_RETURN_IF_ERROR(layer(l));
  if (w.mtp) {
    MOE_RETURN_IF_ERROR(layer(w.mtp->layer));
    MOE_RETURN_IF_ERROR(fn(w.mtp->eh_proj, "eh_proj"));
  }
  return absl::OkStatus();
}

template <class Src>
absl::StatusOr<int64_t> PlanResidentImpl(const Src& ck, const ModelConfig& c, const LoadOptions& opt,
                                         std::optional<QFormat> dense_format, bool* has_mtp) {
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<ModelWeights> w, LoadResidentImpl(SizingSource<Src>{ck}, c, opt));
  if (dense_format) {
    ForEachRequantizable(*w, [&](OwnedMatrix& m, const std::string&) {
      if (m.m.rows > 0) m.m.format = *dense_format;
      return absl::OkStatus();
    }).IgnoreError();
  }
  if (has_mtp != nullptr) *has_mtp = w->mtp != nullptr;
  return w->Bytes();
}

}  // namespace

absl::StatusOr<int64_t> PlanResidentBytes(const SafetensorsReader& ck, const ModelConfig& c, const LoadOptions& opt,
                                          std::optional<QFormat> dense_format, bool* has_mtp) {
  return PlanResidentImpl(ck, c, opt, dense_format, has_mtp);
}

template <class Src>
absl::StatusOr<std::vector<PlannedTensor>> PlanResidentPartsImpl(const Src& ck, const ModelConfig& c,
                                                                 const LoadOptions& opt) {
  std::vector<PlannedTensor> parts;
  MOE_RETURN_IF_ERROR(LoadResidentImpl(SizingSource<Src>{ck, &parts}, c, opt).status());
  return parts;
}

absl::StatusOr<std::vector<PlannedTensor>> PlanResidentParts(const SafetensorsReader& ck, const ModelConfig& c,
                                                             const LoadOptions& opt) {
  return PlanResidentPartsImpl(ck, c, opt);
}
absl::StatusOr<std::vector<PlannedTensor>> PlanResidentParts(const Container& ck, const ModelConfig& c,
                                                             const LoadOptions& opt) {
  return PlanResidentPartsImpl(ck, c, opt);
}

absl::StatusOr<int64_t> PlanResidentBytes(const Container& ck, const ModelConfig& c, const LoadOptions& opt,
                                          std::optional<QFormat> dense_format, bool* has_mtp) {
  return PlanResidentImpl(ck, c, opt, dense_format, has_mtp);
}

absl::StatusOr<int64_t> PlanExpertBytes(const SafetensorsReader& ck, const ModelConfig& c, int layer,
                                        std::optional<QFormat> expert_format) {
  const int64_t H = c.hidden_size, Im = c.moe_intermediate_size;
  const std::string p = absl::StrCat("model.layers.", layer, ".mlp.experts.");
  const TensorInfo* gu = ck.Find(p + "gate_up_proj");
  const TensorInfo* parts[3] = {gu, gu, ck.Find(p + "down_proj")};
  if (gu == nullptr) {
    for (int i = 0; i < 3; ++i) parts[i] = ck.Find(absl::StrCat(p, "0.", AV(kExpertProjNames[i]), ".weight"));
  }
  const int64_t shape[3][2] = {{Im, H}, {Im, H}, {H, Im}};
  int64_t b = 0;
  for (int i = 0; i < 3; ++i) {
    if (parts[i] == nullptr) {
      return absl::NotFoundError(absl::StrCat(ck.path(), ": layer ", layer, " has no routed expert ", AV(kExpertProjNames[i])));
    }
    const QFormat f = expert_format.value_or(LoadedFormat(*parts[i], false));
    b += StoredMatrixBytes(f, shape[i][0], shape[i][1]);
  }
  return b;
}

absl::StatusOr<int64_t> PlanExpertBytes(const Container& ck, const ModelConfig& c, int layer,
                                        std::optional<QFormat> expert_format) {
  const ExpertRecordInfo* r = ck.FindExpert(layer, 0);
  if (r == nullptr) return absl::NotFoundError(absl::StrCat("container: no record for layer ", layer, " expert 0"));
  int64_t b = 0;
  for (const auto& part : r->parts) {
    const ContainerTensor& t = *part.tensor;
    b += StoredMatrixBytes(expert_format.value_or(t.format), t.rows, t.cols);
  }
  return b;
}

absl::Status Requantize(OwnedMatrix& m, QFormat f, std::string_view what) {
  if (m.m.format == f || m.m.rows == 0) return absl::OkStatus();
  const int64_t R = m.m.rows, C = m.m.cols;
  std::vector<float> w(R * C);
  for (int64_t r = 0; r < R; ++r) DequantRow(m.m, r, w.data() + r * C);
  OwnedMatrix q;
  q.m.format = f;
  q.m.rows = R;
  q.m.cols = C;
  q.data.resize(DataBytes(f, R, C));
  q.scales.resize(ScaleBytes(f, R, C) / sizeof(float));
  MOE_RETURN_IF_ERROR(QuantizeMatrix(f, w.data(), R, C, q.data.data(), q.scales.data(), what));
  q.m.data = q.data.data();
  q.m.scales = q.scales.empty() ? nullptr : q.scales.data();
  m = std::move(q);
  return absl::OkStatus();
}

absl::Status RequantizeDense(ModelWeights& w, QFormat f) {
  return ForEachRequantizable(w, [f](OwnedMatrix& m, const std::string& what) { return Requantize(m, f, what); });
}

absl::StatusOr<OwnedExpert> LoadExpertFromCheckpoint(const SafetensorsReader& ck, const ModelConfig& c, int layer, int e) {
  if (e < 0 || e >= c.n_routed_experts) return absl::NotFoundError(absl::StrCat("expert ", e, " out of range"));
  const int64_t H = c.hidden_size, Im = c.moe_intermediate_size, E = c.n_routed_experts;
  const std::string p = absl::StrCat("model.layers.", layer, ".mlp.experts.");
  OwnedExpert x;
  if (const TensorInfo* gu = ck.Find(p + "gate_up_proj"); gu != nullptr) {
    MOE_ASSIGN_OR_RETURN(gu, Need(ck, p + "gate_up_proj", {E, 2 * Im, H}));
    MOE_ASSIGN_OR_RETURN(const TensorInfo* dn, Need(ck, p + "down_proj", {E, H, Im}));
    MOE_ASSIGN_OR_RETURN(x.gate, MakeMatrix(ck, c, *gu, e * 2 * Im * H, Im, H, nullptr, false));
    MOE_ASSIGN_OR_RETURN(x.up, MakeMatrix(ck, c, *gu, e * 2 * Im * H + Im * H, Im, H, nullptr, false));
    MOE_ASSIGN_OR_RETURN(x.down, MakeMatrix(ck, c, *dn, e * H * Im, H, Im, nullptr, false));
    return x;
  }
  const std::string q = absl::StrCat(p, e, ".");
  MOE_ASSIGN_OR_RETURN(x.gate, LoadMatrix(ck, c, q + "gate_proj.weight", Im, H));
  MOE_ASSIGN_OR_RETURN(x.up, LoadMatrix(ck, c, q + "up_proj.weight", Im, H));
  MOE_ASSIGN_OR_RETURN(x.down, LoadMatrix(ck, c, q + "down_proj.weight", H, Im));
  return x;
}

absl::Status ValidateExperts(const SafetensorsReader& ck, const ModelConfig& c, bool with_mtp) {
  const int64_t H = c.hidden_size, Im = c.moe_intermediate_size, E = c.n_routed_experts;
  auto check_layer = [&](int l) -> absl::Status {
    const std::string p = absl::StrCat("model.layers.", l, ".mlp.experts.");
    if (ck.Find(p + "gate_up_proj") != nullptr) {
      MOE_RETURN_IF_ERROR(Need(ck, p + "gate_up_proj", {E, 2 * Im, H}).status());
      return Need(ck, p + "down_proj", {E, H, Im}).status();
    }
    for (int e = 0; e < E; ++e) {
      const std::string q = absl::StrCat(p, e, ".");
      MOE_RETURN_IF_ERROR(Need(ck, q + "gate_proj.weight", {Im, H}).status());
      MOE_RETURN_IF_ERROR(Need(ck, q + "up_proj.weight", {Im, H}).status());
      MOE_RETURN_IF_ERROR(Need(ck, q + "down_proj.weight", {H, Im}).status());
    }
    return absl::OkStatus();
  };
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    if (c.layer_is_moe[l]) MOE_RETURN_IF_ERROR(check_layer(l));
  }
  if (with_mtp) MOE_RETURN_IF_ERROR(check_layer(c.num_hidden_layers));
  return absl::OkStatus();
}

absl::StatusOr<OwnedExpert> LoadExpertFromContainer(const Container& ck, int layer, int e) {
  const ExpertRecordInfo* r = ck.FindExpert(layer, e);
  if (r == nullptr) return absl::NotFoundError(absl::StrCat("container: no record for layer ", layer, " expert ", e));
  // The matrices view the record where it was read (one read, no copy); the buffer lives as long as
  // any of them (OwnedMatrix::mapping).
  auto buf = std::make_shared<AlignedBuffer>();
  MOE_ASSIGN_OR_RETURN(std::span<const uint8_t> bytes, ck.ReadRecord(*r, buf.get()));
  const auto views = Container::ViewRecord(*r, bytes.data());
  OwnedExpert x;
  OwnedMatrix* out[3] = {&x.gate, &x.up, &x.down};
  for (int p = 0; p < 3; ++p) {
    const QMatrixView& v = views[p];
    OwnedMatrix& m = *out[p];
    m.m.format = v.format;
    m.m.rows = v.rows;
    m.m.cols = v.cols;
    m.m.data = v.data;
    m.m.scales = v.scales;
    m.mapping = buf;
  }
  return x;
}

absl::Status ValidateExperts(const Container& ck, const ModelConfig& c, bool with_mtp) {
  auto check_layer = [&](int l) -> absl::Status {
    for (int e = 0; e < c.n_routed_experts; ++e) {
      const ExpertRecordInfo* r = ck.FindExpert(l, e);
      if (r == nullptr) return absl::NotFoundError(absl::StrCat("container: no record for layer ", l, " expert ", e));
      const int64_t H = c.hidden_size, Im = c.moe_intermediate_size;
      const int64_t want[3][2] = {{Im, H}, {Im, H}, {H, Im}};
      for (int p = 0; p < 3; ++p) {
        const ContainerTensor* t = r->parts[p].tensor;
        if (t == nullptr || t->rows != want[p][0] || t->cols != want[p][1]) {
          return absl::InvalidArgumentError(absl::StrCat("container: layer ", l, " expert ", e, " part ", p,
                                                         " does not match the config"));
        }
      }
    }
    return absl::OkStatus();
  };
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    if (c.layer_is_moe[l]) MOE_RETURN_IF_ERROR(check_layer(l));
  }
  if (with_mtp) MOE_RETURN_IF_ERROR(check_layer(c.num_hidden_layers));
  return absl::OkStatus();
}

}  // namespace moe
