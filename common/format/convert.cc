#include "common/format/convert.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/base/atomic_file.h"
#include "common/base/aligned_buffer.h"
#include "common/base/log.h"
#include "common/base/status.h"
#include "common/format/container.h"
#include "common/format/container_layout.h"
#include "common/format/crc32c.h"
#include "common/format/dtype.h"
#include "common/format/quantize.h"
#include "common/format/safetensors.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kPlanVersion = 1;
constexpr uint64_t kSlabBytes = 8ull << 20;  // float32 rows decoded at once (stays in L2/L3)

absl::Status Errno(std::string_view what, const std::string& path) { return ErrnoStatus(what, path); }

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

absl::Status PWriteAll(int fd, const void* p, uint64_t n, uint64_t off, const std::string& path) {
  const auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, b, std::min<uint64_t>(n, 1ull << 30), static_cast<off_t>(off));
    if (w < 0) {
      if (errno == EINTR) continue;
      return Errno("write", path);
    }
    b += w;
    n -= static_cast<uint64_t>(w);
    off += static_cast<uint64_t>(w);
  }
  return absl::OkStatus();
}

// Publishes `content` as dir/name (common/base/atomic_file.h).
absl::Status WriteFileAtomic(const std::string& dir, const std::string& name,
                             const std::string& content) {
  return WriteFileAtomically(dir + "/" + name, content);
}

// ---- the plan ------------------------------------------------------------

struct Source {
  std::string name;  // input tensor
  int file = 0;      // input file index
};

struct PlanTensor {
  std::string name;
  QFormat format = QFormat::kF32;
  std::vector<int64_t> shape;
  TensorClass cls;
  Source weight;
  std::optional<Source> scale;  // FP8 block scales
  uint64_t source_bytes = 0;
};

struct PlanShard {
  std::string file;
  std::vector<PlanTensor> tensors;
  std::vector<std::pair<int, int>> records;  // (layer, expert)
  std::set<int> inputs;
  uint64_t source_bytes = 0;
};

struct Plan {
  std::string policy;
  json model;
  std::vector<std::string> inputs;       // input shard file names
  std::vector<uint64_t> input_bytes;
  std::vector<PlanShard> shards;
  std::string id;  // crc32c of the plan JSON
};

json PlanToJson(const Plan& p) {
  json shards = json::array();
  for (const auto& s : p.shards) {
    json ts = json::array();
    for (const auto& t : s.tensors) {
      json j = {{"name", t.name},
                {"format", std::string(Name(t.format))},
                {"shape", t.shape},
                {"src", t.weight.name},
                {"src_file", t.weight.file},
                {"bytes", t.source_bytes}};
      if (t.scale) {
        j["scale"] = t.scale->name;
        j["scale_file"] = t.scale->file;
      }
      ts.push_back(std::move(j));
    }
    json recs = json::array();
    for (auto [l, e] : s.records) recs.push_back({l, e});
    shards.push_back({{"file", s.file}, {"tensors", std::move(ts)}, {"records", std::move(recs)}});
  }
  return {{"version", kPlanVersion}, {"policy", p.policy},        {"model", p.model},
          {"inputs", p.inputs},      {"input_bytes", p.input_bytes}, {"shards", std::move(shards)}};
}

absl::StatusOr<Plan> PlanFromJson(const json& j, const std::string& path) {
  Plan p;
  try {
    if (j.at("version").get<int>() != kPlanVersion) {
      return absl::FailedPreconditionError(absl::StrCat(path, ": plan version mismatch"));
    }
    p.policy = j.at("policy").get<std::string>();
    p.model = j.at("model");
    p.inputs = j.at("inputs").get<std::vector<std::string>>();
    p.input_bytes = j.at("input_bytes").get<std::vector<uint64_t>>();
    const int L = p.model.at("num_hidden_layers").get<int>();
    for (const auto& sj : j.at("shards")) {
      PlanShard s;
      s.file = sj.at("file").get<std::string>();
      for (const auto& tj : sj.at("tensors")) {
        PlanTensor t;
        t.name = tj.at("name").get<std::string>();
        auto f = QFormatFromName(tj.at("format").get<std::string>());
        if (!f) return absl::DataLossError(absl::StrCat(path, ": bad format for ", t.name));
        t.format = *f;
        t.shape = tj.at("shape").get<std::vector<int64_t>>();
        MOE_ASSIGN_OR_RETURN(t.cls, Classify(t.name, L));
        t.weight = {tj.at("src").get<std::string>(), tj.at("src_file").get<int>()};
        if (tj.contains("scale")) t.scale = Source{tj.at("scale").get<std::string>(), tj.at("scale_file").get<int>()};
        t.source_bytes = tj.at("bytes").get<uint64_t>();
        s.inputs.insert(t.weight.file);
        if (t.scale) s.inputs.insert(t.scale->file);
        s.source_bytes += t.source_bytes;
        s.tensors.push_back(std::move(t));
      }
      for (const auto& r : sj.at("records")) s.records.push_back({r.at(0).get<int>(), r.at(1).get<int>()});
      p.shards.push_back(std::move(s));
    }
  } catch (const json::exception& e) {
    return absl::DataLossError(absl::StrCat(path, ": malformed plan: ", e.what()));
  }
  return p;
}

absl::StatusOr<json> ModelIdentity(const std::string& in_dir) {
  const std::string path = in_dir + "/config.json";
  MOE_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  json c = json::parse(text, nullptr, false);
  if (!c.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  json m = json::object();
  for (const char* key : {"model_type", "num_hidden_layers", "hidden_size"}) {
    if (!c.contains(key)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": missing field '", key, "'"));
    }
    m[key] = c[key];
  }
  if (!c["num_hidden_layers"].is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": 'num_hidden_layers' is not an integer"));
  }
  m["n_routed_experts"] = c.value("n_routed_experts", 0);
  m["num_nextn_predict_layers"] = c.value("num_nextn_predict_layers", 0);
  if (c.contains("architectures")) m["architectures"] = c["architectures"];
  m["config_crc32c"] = Hex32(crc32c::Mask(crc32c::Value(text.data(), text.size())));
  return m;
}

absl::StatusOr<Plan> MakePlan(const ConvertOptions& o) {
  Plan p;
  p.policy = o.policy.ToString();
  MOE_ASSIGN_OR_RETURN(p.model, ModelIdentity(o.in_dir));
  const int L = p.model["num_hidden_layers"].get<int>();
  OpenOptions ropt;
  ropt.direct_io = false;
  MOE_ASSIGN_OR_RETURN(auto reader, SafetensorsReader::Open(o.in_dir, ropt));
  for (int f = 0; f < reader->num_files(); ++f) {
    p.inputs.push_back(fs::path(reader->file(f).path).filename().string());
    p.input_bytes.push_back(reader->file(f).size);
  }
  p.shards.resize(p.inputs.size());
  for (size_t k = 0; k < p.shards.size(); ++k) p.shards[k].file = p.inputs[k];
  struct ExpertParts {
    int parts[3] = {-1, -1, -1};  // indices into `pending`
  };
  std::vector<PlanTensor> all;
  std::map<std::pair<int, int>, ExpertParts> experts;
  for (const TensorInfo& t : reader->tensors()) {
    if (t.name.size() > kScaleInvSuffix.size() &&
        std::string_view(t.name).substr(t.name.size() - kScaleInvSuffix.size()) == kScaleInvSuffix) {
      const std::string w = t.name.substr(0, t.name.size() - kScaleInvSuffix.size());
      const TensorInfo* wt = reader->Find(w);
      if (wt == nullptr || wt->dtype != DType::kF8E4M3) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", t.name, "' in ", reader->file(t.file).path,
            ": block scale without an F8_E4M3 weight '", w, "'"));
      }
      continue;
    }
    auto cls = Classify(t.name, L);
    if (!cls.ok()) return Annotate(cls.status(), reader->file(t.file).path);
    PlanTensor pt;
    pt.name = t.name;
    pt.shape = t.shape;
    pt.cls = *cls;
    pt.weight = {t.name, t.file};
    pt.source_bytes = t.nbytes;
    switch (t.dtype) {
      case DType::kF32:
      case DType::kF16:
      case DType::kBF16:
        break;
      case DType::kF8E4M3: {
        const TensorInfo* s = reader->ScaleOf(t);
        if (s == nullptr) {
          return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' in ",
                                                         reader->file(t.file).path,
                                                         ": FP8 weight without its _scale_inv"));
        }
        pt.scale = Source{s->name, s->file};
        pt.source_bytes += s->nbytes;
        break;
      }
      default:
        return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' in ",
                                                       reader->file(t.file).path, ": dtype ",
                                                       AV(DTypeName(t.dtype)),
                                                       " cannot be converted"));
    }
    int64_t rows, cols;
    if (!MatrixDims(t.shape, &rows, &cols).ok()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "': empty or scalar shape"));
    }
    pt.format = o.policy.FormatFor(pt.cls, t.ndim());
    if (pt.cls.role == TensorRole::kExpert) {
      if (t.ndim() != 2) {
        return absl::InvalidArgumentError(absl::StrCat("expert tensor '", t.name, "' is not 2-D"));
      }
      experts[{pt.cls.layer, pt.cls.expert}].parts[static_cast<int>(pt.cls.proj)] =
          static_cast<int>(all.size());
    }
    all.push_back(std::move(pt));
  }
  auto out_file = [](const PlanTensor& t) {
    return std::max(t.weight.file, t.scale ? t.scale->file : 0);
  };
  std::vector<int> dest(all.size(), -1);
  for (const auto& [key, ep] : experts) {
    int k = 0;
    for (int p = 0; p < 3; ++p) {
      if (ep.parts[p] < 0) {
        return absl::InvalidArgumentError(absl::StrCat("expert (layer ", key.first, ", expert ",
                                                       key.second, ") has no ",
                                                       AV(kExpertProjNames[p]), ".weight"));
      }
      k = std::max(k, out_file(all[ep.parts[p]]));
    }
    for (int p = 0; p < 3; ++p) dest[ep.parts[p]] = k;
    p.shards[k].records.push_back(key);
  }
  for (size_t i = 0; i < all.size(); ++i) {
    const int k = dest[i] >= 0 ? dest[i] : out_file(all[i]);
    PlanShard& s = p.shards[k];
    s.inputs.insert(all[i].weight.file);
    if (all[i].scale) s.inputs.insert(all[i].scale->file);
    s.source_bytes += all[i].source_bytes;
    s.tensors.push_back(std::move(all[i]));
  }
  return p;
}

// ---- converting --------------------------------------------------------------

class InputSet {
 public:
  InputSet(std::string dir, const Plan& plan) : dir_(std::move(dir)), plan_(plan) {}
  ~InputSet() {
    for (auto& [f, fd] : plain_fds_) ::close(fd);
  }
  absl::StatusOr<const SafetensorsReader*> Get(int file) {
    auto& r = readers_[file];
    if (!r) {
      OpenOptions opt;
      opt.check_fp8_scales = false;
      opt.direct_io = true;
      const std::string path = dir_ + "/" + plan_.inputs[file];
      MOE_ASSIGN_OR_RETURN(r, SafetensorsReader::Open(path, opt));
    }
    return r.get();
  }
  void Close(int file) {
    readers_.erase(file);
    if (auto it = plain_fds_.find(file); it != plain_fds_.end()) {
      ::close(it->second);
      plain_fds_.erase(it);
    }
  }

  // True if bytes [off, off + len) of input `file` are all zero. Judged from
  // the file's holes (SEEK_DATA / SEEK_HOLE); data extents inside the range
  // are read only while they total at most kMaxZeroProbe bytes (the edges a
  // hole shares with its neighbours' blocks), else the range counts as data.
  absl::StatusOr<bool> IsZero(int file, uint64_t off, uint64_t len) {
    constexpr uint64_t kMaxZeroProbe = 1ull << 20;
    int& fd = plain_fds_[file];
    const std::string path = dir_ + "/" + plan_.inputs[file];
    if (fd <= 0) {
      fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        plain_fds_.erase(file);
        return Errno("open", path);
      }
    }
    const uint64_t end = off + len;
    uint64_t pos = off, probed = 0;
    std::vector<uint8_t> buf;
    while (pos < end) {
      const off_t d = ::lseek(fd, static_cast<off_t>(pos), SEEK_DATA);
      if (d < 0) {
        if (errno == ENXIO) return true;  // only holes up to the end of the file
        if (errno == EINVAL) return false;  // no SEEK_DATA here: treat as data
        return Errno("seek", path);
      }
      if (static_cast<uint64_t>(d) >= end) return true;
      const off_t h = ::lseek(fd, d, SEEK_HOLE);
      if (h < 0) return Errno("seek", path);
      const uint64_t a = static_cast<uint64_t>(d), b = std::min<uint64_t>(end, static_cast<uint64_t>(h));
      probed += b - a;
      if (probed > kMaxZeroProbe) return false;
      buf.resize(b - a);
      if (::pread(fd, buf.data(), buf.size(), static_cast<off_t>(a)) != static_cast<ssize_t>(buf.size()))
        return Errno("read", path);
      if (std::any_of(buf.begin(), buf.end(), [](uint8_t x) { return x != 0; })) return false;
      pos = b;
    }
    return true;
  }

 private:
  std::string dir_;
  const Plan& plan_;
  std::map<int, std::unique_ptr<SafetensorsReader>> readers_;
  std::map<int, int> plain_fds_;  // buffered descriptors for SEEK_DATA probes
};

// Decodes rows [r0, r1) of a source tensor to float32 (FP8 with its block scales).
class SourceDecoder {
 public:
  absl::Status Open(InputSet* in, const PlanTensor& t) {
    MOE_ASSIGN_OR_RETURN(wr_, in->Get(t.weight.file));
    MOE_ASSIGN_OR_RETURN(wt_, wr_->Get(t.weight.name));
    if (t.scale) {
      MOE_ASSIGN_OR_RETURN(const SafetensorsReader* sr, in->Get(t.scale->file));
      MOE_ASSIGN_OR_RETURN(const TensorInfo* st, sr->Get(t.scale->name));
      scales_.resize(static_cast<size_t>(st->numel()));
      MOE_RETURN_IF_ERROR(sr->ReadTensorF32(*st, scales_.data()));
      scale_cols_ = st->shape.size() == 2 ? st->shape[1] : 1;
      for (int i = 0; i < 256; ++i) table_[i] = Fp8E4M3ToF32(static_cast<uint8_t>(i));
    }
    return absl::OkStatus();
  }
  bool fp8_matrix() const { return wt_->dtype == DType::kF8E4M3 && wt_->ndim() == 2; }
  // Non-FP8 (or non-2-D) tensors: rows [r0, r1) as float32.
  absl::Status Rows(int64_t r0, int64_t r1, float* dst) {
    if (wt_->ndim() != 2) return wr_->ReadTensorF32(*wt_, dst);  // whole (small) tensor
    return wr_->ReadRowsF32(*wt_, r0, r1, dst);
  }
  // FP8 matrices: reads raw rows [r0, r1) ...
  absl::Status ReadRaw(int64_t r0, int64_t r1) {
    const int64_t cols = wt_->row_elems();
    raw_r0_ = r0;
    // O_DIRECT (the input is read once; no page-cache copy or pollution).
    MOE_ASSIGN_OR_RETURN(auto span, wr_->ReadRangeDirect(
                                        wt_->file, wt_->offset + static_cast<uint64_t>(r0 * cols),
                                        static_cast<uint64_t>((r1 - r0) * cols), &raw_buf_));
    raw_ = span.data();
    return absl::OkStatus();
  }
  // ... and decodes rows [a, b) of them (within the raw range); thread-safe.
  void DecodeRaw(int64_t a, int64_t b, float* dst) const {
    const int64_t cols = wt_->row_elems();
    for (int64_t r = a; r < b; ++r) {
      const float* srow = scales_.data() + (r / kFp8BlockSize) * scale_cols_;
      const uint8_t* q = raw_ + (r - raw_r0_) * cols;
      float* d = dst + (r - a) * cols;
      for (int64_t c = 0; c < cols; ++c) d[c] = table_[q[c]] * srow[c / kFp8BlockSize];
    }
  }
  const TensorInfo& info() const { return *wt_; }

 private:
  const SafetensorsReader* wr_ = nullptr;
  const TensorInfo* wt_ = nullptr;
  std::vector<float> scales_;
  int64_t scale_cols_ = 1;
  float table_[256] = {};
  AlignedBuffer raw_buf_;
  const uint8_t* raw_ = nullptr;
  int64_t raw_r0_ = 0;
};

LayoutTensor ToLayout(const PlanTensor& t) {
  LayoutTensor l;
  l.name = t.name;
  l.cls = t.cls;
  l.format = t.format;
  l.shape = t.shape;
  (void)MatrixDims(t.shape, &l.rows, &l.cols);
  return l;
}

absl::StatusOr<ShardLayout> LayoutFor(const Plan& plan, int k) {
  const PlanShard& s = plan.shards[k];
  std::vector<LayoutTensor> tensors;
  std::map<std::pair<int, int>, std::array<int, 3>> parts;
  for (const auto& t : s.tensors) {
    if (t.cls.role == TensorRole::kExpert) {
      parts[{t.cls.layer, t.cls.expert}][static_cast<int>(t.cls.proj)] =
          static_cast<int>(tensors.size());
    }
    tensors.push_back(ToLayout(t));
  }
  std::vector<LayoutRecord> records;
  for (auto [l, e] : s.records) {
    LayoutRecord r;
    r.layer = l;
    r.expert = e;
    const auto& p = parts[{l, e}];
    std::copy(p.begin(), p.end(), r.parts);
    records.push_back(r);
  }
  std::sort(records.begin(), records.end(), [](const LayoutRecord& a, const LayoutRecord& b) {
    return std::tie(a.layer, a.expert) < std::tie(b.layer, b.expert);
  });
  std::map<std::string, std::string> meta = {
      {std::string(kMetaModel), plan.model.dump()},
      {std::string(kMetaPlan), plan.id},
      {std::string(kMetaShard), absl::StrCat(k + 1, "/", plan.shards.size())}};
  MOE_ASSIGN_OR_RETURN(ShardLayout layout,
                       LayOutShard(std::move(tensors), std::move(records), std::move(meta)));
  layout.pad_prefix = absl::StrCat(AV(kPadTensorPrefix), k + 1, ".");
  return layout;
}

// Where QuantizeRows puts stored rows [r0, r1) of a tensor, and what happens
// once they are there.
class RowTarget {
 public:
  virtual ~RowTarget() = default;
  virtual std::pair<uint8_t*, float*> Rows(int64_t r0, int64_t r1) = 0;
  virtual absl::Status Done(int64_t r0, int64_t r1) = 0;
};

// Rows straight into their place inside an expert record buffer.
class RecordTarget final : public RowTarget {
 public:
  RecordTarget(uint8_t* data, float* scales, int64_t row_bytes, int64_t groups)
      : data_(data), scales_(scales), rb_(row_bytes), ng_(groups) {}
  std::pair<uint8_t*, float*> Rows(int64_t r0, int64_t) override { return {data_ + r0 * rb_, scales_ + r0 * ng_}; }
  absl::Status Done(int64_t, int64_t) override { return absl::OkStatus(); }

 private:
  uint8_t* data_;
  float* scales_;
  int64_t rb_, ng_;
};

// A non-expert tensor streamed to the file a slab at a time (the data CRC
// extended as it goes, scales kept for the end): memory is one slab, not the
// tensor (lm_head / embed_tokens of GLM-5 are ~1 GB at q8).
class StreamTarget final : public RowTarget {
 public:
  StreamTarget(int fd, const std::string& path, uint64_t data_at, const LayoutTensor& lt)
      : fd_(fd), path_(path), at_(data_at), rb_(RowBytes(lt.format, lt.cols)), ng_(GroupsPerRow(lt.format, lt.cols)) {
    scales_.assign(static_cast<size_t>(lt.scales_bytes / sizeof(float)), 0.0f);
  }
  std::pair<uint8_t*, float*> Rows(int64_t r0, int64_t r1) override {
    data_.resize(static_cast<size_t>((r1 - r0) * rb_));
    return {data_.data(), scales_.data() + r0 * ng_};
  }
  absl::Status Done(int64_t r0, int64_t r1) override {
    crc_ = crc32c::Extend(crc_, data_.data(), data_.size());
    written_ += data_.size();
    (void)r1;
    return PWriteAll(fd_, data_.data(), data_.size(), at_ + static_cast<uint64_t>(r0 * rb_), path_);
  }
  // Writes the scales and returns the tensor's masked CRC (data, then scales).
  absl::StatusOr<uint32_t> Finish(uint64_t scales_at) {
    const uint64_t sb = scales_.size() * sizeof(float);
    if (sb > 0) MOE_RETURN_IF_ERROR(PWriteAll(fd_, scales_.data(), sb, scales_at, path_));
    written_ += sb;
    return crc32c::Mask(crc32c::Extend(crc_, scales_.data(), sb));
  }
  uint64_t written() const { return written_; }

 private:
  int fd_;
  const std::string& path_;
  uint64_t at_;
  int64_t rb_, ng_;
  std::vector<uint8_t> data_;
  std::vector<float> scales_;
  uint32_t crc_ = 0;
  uint64_t written_ = 0;
};

// Quantizes tensor t with its format, row slab by row slab, into `target`.
absl::Status QuantizeRows(InputSet* in, const PlanTensor& pt, const LayoutTensor& lt, RowTarget* target,
                          std::vector<float>* slab) {
  SourceDecoder dec;
  MOE_RETURN_IF_ERROR(dec.Open(in, pt));
  if (dec.fp8_matrix()) {
    // One parallel region per raw slab: each thread decodes a few rows into
    // a cache-resident buffer and quantizes them right away (few barriers;
    // dynamic chunks so a descheduled thread on a shared machine does not
    // hold the others up).
    constexpr int64_t kChunkRows = 16;
    const int64_t raw_rows = std::max<int64_t>(kChunkRows, static_cast<int64_t>(kSlabBytes * 8) / lt.cols);
    const int64_t rb = RowBytes(lt.format, lt.cols);
    const int64_t ng = GroupsPerRow(lt.format, lt.cols);
    for (int64_t r0 = 0; r0 < lt.rows; r0 += raw_rows) {
      const int64_t r1 = std::min(lt.rows, r0 + raw_rows);
      MOE_RETURN_IF_ERROR(dec.ReadRaw(r0, r1));
      // Not a structured binding: clang 14 (the fuzz build) cannot capture one in the OpenMP region.
      const std::pair<uint8_t*, float*> out = target->Rows(r0, r1);
      uint8_t* const data = out.first;
      float* const scales = out.second;
      absl::Status err;
#pragma omp parallel if ((r1 - r0) * lt.cols >= (1 << 18))
      {
        std::vector<float> buf(static_cast<size_t>(kChunkRows * lt.cols));
#pragma omp for schedule(dynamic, 1)
        for (int64_t c0 = r0; c0 < r1; c0 += kChunkRows) {
          const int64_t c1 = std::min(r1, c0 + kChunkRows);
          dec.DecodeRaw(c0, c1, buf.data());
          absl::Status s = QuantizeMatrix(lt.format, buf.data(), c1 - c0, lt.cols, data + (c0 - r0) * rb,
                                          scales + (c0 - r0) * ng, lt.name);
          if (!s.ok()) {
#pragma omp critical
            if (err.ok()) {
              err = absl::InvalidArgumentError(absl::StrCat(
                  lt.name, ": FP8 weight decodes to a non-finite value (NaN code) in rows [", c0,
                  ", ", c1, ")"));
            }
          }
        }
      }
      MOE_RETURN_IF_ERROR(err);
      MOE_RETURN_IF_ERROR(target->Done(r0, r1));
    }
    return absl::OkStatus();
  }
  const int64_t rows_per_slab =
      lt.shape.size() != 2 ? lt.rows
                           : std::max<int64_t>(1, static_cast<int64_t>(kSlabBytes / 4) / lt.cols);
  for (int64_t r0 = 0; r0 < lt.rows; r0 += rows_per_slab) {
    const int64_t r1 = std::min(lt.rows, r0 + rows_per_slab);
    slab->resize(static_cast<size_t>((r1 - r0) * lt.cols));
    MOE_RETURN_IF_ERROR(dec.Rows(r0, r1, slab->data()));
    auto [data, scales] = target->Rows(r0, r1);
    MOE_RETURN_IF_ERROR(QuantizeMatrix(lt.format, slab->data(), r1 - r0, lt.cols, data, scales, lt.name));
    MOE_RETURN_IF_ERROR(target->Done(r0, r1));
  }
  return absl::OkStatus();
}

// Masked-free CRC32C of n zero bytes (cached: a full-size model has ~20k
// zero records of a handful of lengths).
class ZeroCrc {
 public:
  uint32_t Of(uint64_t n) {
    auto it = cache_.find(n);
    if (it != cache_.end()) return it->second;
    static const std::vector<uint8_t> zeros(1 << 20, 0);
    uint32_t c = 0;
    for (uint64_t left = n; left > 0;) {
      const uint64_t k = std::min<uint64_t>(left, zeros.size());
      c = crc32c::Extend(c, zeros.data(), k);
      left -= k;
    }
    return cache_[n] = c;
  }

 private:
  std::map<uint64_t, uint32_t> cache_;
};

// Which of shard k's records have all-zero sources (file holes).
absl::StatusOr<std::vector<bool>> ZeroRecords(const Plan& plan, int k, InputSet* in) {
  const PlanShard& ps = plan.shards[k];
  std::map<std::pair<int, int>, bool> zero;
  for (const auto& r : ps.records) zero[r] = true;
  for (const PlanTensor& t : ps.tensors) {
    if (t.cls.role != TensorRole::kExpert) continue;
    bool& z = zero[{t.cls.layer, t.cls.expert}];
    if (!z) continue;
    for (const Source* src : {&t.weight, t.scale ? &*t.scale : nullptr}) {
      if (src == nullptr || !z) continue;
      MOE_ASSIGN_OR_RETURN(const SafetensorsReader* r, in->Get(src->file));
      MOE_ASSIGN_OR_RETURN(const TensorInfo* ti, r->Get(src->name));
      MOE_ASSIGN_OR_RETURN(z, in->IsZero(src->file, ti->offset, ti->nbytes));
    }
  }
  std::vector<bool> out;
  for (const auto& r : ps.records) out.push_back(zero[r]);
  return out;
}

uint64_t ZeroSourceBytes(const Plan& plan, int k, const std::vector<bool>& zero) {
  const PlanShard& ps = plan.shards[k];
  std::set<std::pair<int, int>> z;
  for (size_t r = 0; r < ps.records.size(); ++r)
    if (zero[r]) z.insert(ps.records[r]);
  uint64_t b = 0;
  for (const PlanTensor& t : ps.tensors)
    if (t.cls.role == TensorRole::kExpert && z.count({t.cls.layer, t.cls.expert})) b += t.source_bytes;
  return b;
}

int64_t PeakRss() {
  rusage ru;
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;
}

// Reserves disk for [off, off + len) (ENOSPC now rather than mid-write).
absl::Status Reserve(int fd, uint64_t off, uint64_t len, const std::string& path) {
  if (len == 0) return absl::OkStatus();
  if (const int rc = ::posix_fallocate(fd, static_cast<off_t>(off), static_cast<off_t>(len)); rc != 0) {
    errno = rc;
    if (rc != EOPNOTSUPP && rc != EINVAL) return Errno(absl::StrCat("reserve ", len, " bytes for"), path);
  }
  return absl::OkStatus();
}

absl::StatusOr<ConvertShardStat> WriteShard(const ConvertOptions& o, const Plan& plan, int k, InputSet* in,
                                            std::vector<bool> zero,
                                            const std::function<void(uint64_t)>& advanced) {
  const auto t0 = std::chrono::steady_clock::now();
  const PlanShard& ps = plan.shards[k];
  MOE_ASSIGN_OR_RETURN(ShardLayout layout, LayoutFor(plan, k));
  MOE_ASSIGN_OR_RETURN(std::string header, RenderHeader(&layout));
  // Written as PATH.tmp and published whole (atomic_file.h): a crash leaves
  // the .tmp, which a resumed run rewrites.
  MOE_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::Create(o.out_dir + "/" + ps.file));
  const int fd = file.fd();
  const std::string& tmp = file.temp_path();
  struct Closer {
    int fd;
    ~Closer() {
      if (fd >= 0) ::close(fd);
    }
  };
  ConvertShardStat st;
  st.file = ps.file;
  st.bytes_out = layout.file_bytes();
  st.records = static_cast<int>(layout.records.size());
  // layout.records is sorted by (layer, expert); `zero` follows ps.records.
  std::map<std::pair<int, int>, bool> is_zero;
  for (size_t r = 0; r < ps.records.size(); ++r) is_zero[ps.records[r]] = zero[r];
  // The file at its full size, all holes; disk is reserved for what will be
  // written: the header and non-expert tensors, and every non-zero record.
  if (::ftruncate(fd, static_cast<off_t>(layout.file_bytes())) != 0) return Errno("truncate", tmp);
  const uint64_t base = layout.data_start();
  uint64_t dense_end = base;
  std::vector<int> owner(layout.tensors.size(), -1);
  for (size_t r = 0; r < layout.records.size(); ++r) {
    for (int p : layout.records[r].parts) owner[p] = static_cast<int>(r);
  }
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    if (owner[i] < 0) {
      const LayoutTensor& lt = layout.tensors[i];
      dense_end = std::max(dense_end, base + std::max(lt.data_offset + lt.data_bytes, lt.scales_offset + lt.scales_bytes));
    }
  }
  MOE_RETURN_IF_ERROR(Reserve(fd, 0, dense_end, tmp));
  for (const auto& r : layout.records) {
    if (!is_zero[{r.layer, r.expert}]) MOE_RETURN_IF_ERROR(Reserve(fd, base + r.offset, r.length, tmp));
  }
  // Records go out with O_DIRECT (4 KiB-aligned buffer, offset and length):
  // no page-cache copy, no writeback at fsync. Falls back to buffered writes
  // where the file system refuses O_DIRECT (tmpfs).
  const int dfd = ::open(tmp.c_str(), O_WRONLY | O_CLOEXEC | O_DIRECT);
  Closer dcloser{dfd};
  std::vector<float> slab;
  // Non-expert tensors, streamed.
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    if (owner[i] >= 0) continue;
    LayoutTensor& lt = layout.tensors[i];
    StreamTarget target(fd, tmp, base + lt.data_offset, lt);
    MOE_RETURN_IF_ERROR(QuantizeRows(in, ps.tensors[i], lt, &target, &slab));
    MOE_ASSIGN_OR_RETURN(lt.crc, target.Finish(base + lt.scales_offset));
    st.bytes_written += target.written();
    st.bytes_in += ps.tensors[i].source_bytes;
    advanced(ps.tensors[i].source_bytes);
  }
  // Expert records: assembled in memory, one write each; zero ones stay holes.
  AlignedBuffer rec;
  ZeroCrc zero_crc;
  for (auto& r : layout.records) {
    uint64_t src_bytes = 0;
    for (int p : r.parts) src_bytes += ps.tensors[p].source_bytes;
    st.bytes_in += src_bytes;
    if (is_zero[{r.layer, r.expert}]) {
      for (int p : r.parts) {
        LayoutTensor& lt = layout.tensors[p];
        lt.crc = crc32c::Mask(zero_crc.Of(lt.data_bytes + lt.scales_bytes));
      }
      r.crc = crc32c::Mask(zero_crc.Of(r.length));
      ++st.zero_records;
      continue;
    }
    if (rec.capacity() < r.length) rec = AlignedBuffer(r.length);
    std::memset(rec.data(), 0, r.length);
    for (int p : r.parts) {
      LayoutTensor& lt = layout.tensors[p];
      uint8_t* d = rec.data() + (lt.data_offset - r.offset);
      float* s = reinterpret_cast<float*>(rec.data() + (lt.scales_offset - r.offset));
      RecordTarget target(d, s, RowBytes(lt.format, lt.cols), GroupsPerRow(lt.format, lt.cols));
      MOE_RETURN_IF_ERROR(QuantizeRows(in, ps.tensors[p], lt, &target, &slab));
      uint32_t crc = crc32c::Value(d, lt.data_bytes);
      crc = crc32c::Extend(crc, s, lt.scales_bytes);
      lt.crc = crc32c::Mask(crc);
    }
    r.crc = crc32c::Mask(crc32c::Value(rec.data(), r.length));
    MOE_RETURN_IF_ERROR(PWriteAll(dfd >= 0 ? dfd : fd, rec.data(), r.length, base + r.offset, tmp));
    st.bytes_written += r.length;
    advanced(src_bytes);
  }
  MOE_ASSIGN_OR_RETURN(std::string final_header, RenderHeader(&layout));
  if (final_header.size() != header.size()) return absl::InternalError("header length changed");
  MOE_RETURN_IF_ERROR(PWriteAll(fd, final_header.data(), final_header.size(), 0, tmp));
  st.bytes_written += final_header.size();
  MOE_RETURN_IF_ERROR(file.Commit());
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  st.peak_rss_bytes = PeakRss();
  return st;
}

// True if out_dir/<file> is a finished shard of this plan (and, with
// verify_full, every CRC matches).
bool ShardIsDone(const ConvertOptions& o, const Plan& plan, int k) {
  const std::string path = o.out_dir + "/" + plan.shards[k].file;
  if (!fs::exists(path)) return false;
  OpenOptions opt;
  opt.check_fp8_scales = false;
  opt.direct_io = false;
  auto reader = SafetensorsReader::Open(path, opt);
  absl::Status s = reader.status();
  if (s.ok()) {
    auto contents = ReadShardContents(**reader, 0);
    s = contents.status();
    if (s.ok() && (contents->plan != plan.id ||
                   contents->tensors.size() != plan.shards[k].tensors.size() ||
                   contents->records.size() != plan.shards[k].records.size())) {
      s = absl::DataLossError("written by a different conversion plan");
    }
    if (s.ok() && o.verify_full) s = VerifyShardData(**reader, 0, *contents);
  }
  if (!s.ok()) {
    MOE_LOG(WARNING) << "redoing " << path << ": " << s.message();
    return false;
  }
  return true;
}

absl::Status CopySideFiles(const std::string& in_dir, const std::string& out_dir) {
  for (const auto& e : fs::directory_iterator(in_dir)) {
    if (!e.is_regular_file()) continue;
    const std::string name = e.path().filename().string();
    const std::string ext = e.path().extension().string();
    if (name == kIndexFileName || ext == ".safetensors" || ext == ".tmp") continue;
    if (!(ext == ".json" || ext == ".jinja" || ext == ".model" || ext == ".txt" ||
          ext == ".tiktoken" || ext == ".py" || ext == ".md")) {
      continue;
    }
    MOE_ASSIGN_OR_RETURN(std::string content, ReadFile(e.path().string()));
    MOE_RETURN_IF_ERROR(WriteFileAtomic(out_dir, name, content));
  }
  return absl::OkStatus();
}

absl::Status WriteManifest(const ConvertOptions& o, const Plan& plan) {
  json shards = json::array();
  json weight_map = json::object();
  uint64_t total = 0;
  for (size_t k = 0; k < plan.shards.size(); ++k) {
    MOE_ASSIGN_OR_RETURN(ShardLayout layout, LayoutFor(plan, static_cast<int>(k)));
    MOE_RETURN_IF_ERROR(RenderHeader(&layout).status());
    shards.push_back({{"file", plan.shards[k].file}, {"bytes", layout.file_bytes()}});
    total += layout.file_bytes();
    for (const auto& t : layout.tensors) {
      weight_map[t.name] = plan.shards[k].file;
      if (t.scales_bytes > 0) weight_map[t.name + std::string(kScaleTensorSuffix)] = plan.shards[k].file;
    }
  }
  json index = {{"metadata", {{"total_size", total}, {"format", "moestream-container"}}},
                {"weight_map", weight_map}};
  MOE_RETURN_IF_ERROR(WriteFileAtomic(o.out_dir, std::string(kIndexFileName), index.dump(1)));
  json manifest = {{"magic", std::string(kContainerMagic)},
                   {"version", kContainerVersion},
                   {"model", plan.model},
                   {"policy", plan.policy},
                   {"plan", plan.id},
                   {"total_bytes", total},
                   {"shards", shards}};
  return WriteFileAtomic(o.out_dir, std::string(kManifestFileName), manifest.dump(1));
}

}  // namespace

absl::StatusOr<ConvertResult> ConvertCheckpoint(const ConvertOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", o.out_dir, ": ", ec.message()));
  const std::string plan_path = o.out_dir + "/" + std::string(kPlanFileName);
  Plan plan;
  if (fs::exists(plan_path)) {
    MOE_ASSIGN_OR_RETURN(std::string text, ReadFile(plan_path));
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded()) return absl::DataLossError(absl::StrCat(plan_path, ": not valid JSON"));
    MOE_ASSIGN_OR_RETURN(plan, PlanFromJson(j, plan_path));
    if (plan.policy != o.policy.ToString()) {
      return absl::FailedPreconditionError(absl::StrCat(
          o.out_dir, " holds a conversion with policy ", plan.policy, "; this run asks for ",
          o.policy.ToString(), " (use another --out or remove it)"));
    }
    plan.id = Hex32(crc32c::Mask(crc32c::Value(text.data(), text.size())));
    MOE_LOG(INFO) << "resuming the conversion planned in " << plan_path;
  } else {
    MOE_ASSIGN_OR_RETURN(plan, MakePlan(o));
    MOE_RETURN_IF_ERROR(CopySideFiles(o.in_dir, o.out_dir));
    const std::string text = PlanToJson(plan).dump(1);
    MOE_RETURN_IF_ERROR(WriteFileAtomic(o.out_dir, std::string(kPlanFileName), text));
    plan.id = Hex32(crc32c::Mask(crc32c::Value(text.data(), text.size())));
  }
  ConvertResult res;
  res.num_shards = static_cast<int>(plan.shards.size());
  const int n = res.num_shards;
  std::vector<bool> done(n, false);
  for (int k = 0; k < n; ++k) done[k] = ShardIsDone(o, plan, k);
  InputSet inputs(o.in_dir, plan);
  // Zero experts are found up front (a few lseeks per record) so the
  // progress counts only bytes that really are converted; with
  // prepare_inputs the inputs are not written yet: found per shard instead.
  std::vector<std::optional<std::vector<bool>>> zero(n);
  ConvertProgress prog;
  prog.num_shards = n;
  for (int k = 0; k < n; ++k) {
    if (done[k]) continue;
    uint64_t bytes = plan.shards[k].source_bytes;
    if (!o.prepare_inputs) {
      bool inputs_present = true;
      for (int j : plan.shards[k].inputs) inputs_present &= fs::exists(o.in_dir + "/" + plan.inputs[j]);
      if (inputs_present) {
        MOE_ASSIGN_OR_RETURN(zero[k], ZeroRecords(plan, k, &inputs));
        bytes -= ZeroSourceBytes(plan, k, *zero[k]);
      }
    }
    prog.bytes_total += bytes;
  }
  auto maybe_delete = [&]() -> absl::Status {
    if (!o.delete_source) return absl::OkStatus();
    for (int j = 0; j < static_cast<int>(plan.inputs.size()); ++j) {
      bool needed = false;
      for (int k = 0; k < n && !needed; ++k) needed = !done[k] && plan.shards[k].inputs.count(j);
      const std::string path = o.in_dir + "/" + plan.inputs[j];
      if (!needed && fs::exists(path)) {
        inputs.Close(j);
        if (::unlink(path.c_str()) != 0) return Errno("delete", path);
        res.deleted.push_back(plan.inputs[j]);
      }
    }
    return absl::OkStatus();
  };
  for (int k = 0; k < n; ++k) {
    if (done[k]) {
      ++res.shards_verified;
      continue;
    }
    if (o.max_shards >= 0 && res.shards_written >= o.max_shards) break;
    if (o.prepare_inputs) {
      std::vector<std::string> names;
      for (int j : plan.shards[k].inputs) names.push_back(plan.inputs[j]);
      MOE_RETURN_IF_ERROR(Annotate(o.prepare_inputs(names), absl::StrCat("preparing the inputs of ", plan.shards[k].file)));
    }
    for (int j : plan.shards[k].inputs) {
      const std::string path = o.in_dir + "/" + plan.inputs[j];
      if (!fs::exists(path)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "input shard ", path, " is needed for output ", plan.shards[k].file,
            " but is gone"));
      }
    }
    if (!zero[k]) {
      MOE_ASSIGN_OR_RETURN(zero[k], ZeroRecords(plan, k, &inputs));
      if (o.prepare_inputs) prog.bytes_total -= ZeroSourceBytes(plan, k, *zero[k]);
    }
    prog.shard = k + 1;
    prog.shard_finished = false;
    auto advanced = [&](uint64_t b) {
      prog.bytes_done += b;
      prog.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (o.progress) o.progress(prog);
    };
    // Zero records are not converted: they advance nothing.
    std::vector<bool> z = *zero[k];
    auto st = WriteShard(o, plan, k, &inputs, z, [&](uint64_t b) { advanced(b); });
    if (!st.ok()) return Annotate(st.status(), absl::StrCat("converting output shard ", plan.shards[k].file));
    done[k] = true;
    ++res.shards_written;
    res.bytes_in += plan.shards[k].source_bytes;
    res.bytes_out += st->bytes_out;
    res.shards.push_back(*st);
    if (o.progress) {
      prog.shard_finished = true;
      prog.shard_seconds = st->seconds;
      prog.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      o.progress(prog);
    }
    MOE_RETURN_IF_ERROR(maybe_delete());
  }
  if (std::all_of(done.begin(), done.end(), [](bool b) { return b; })) {
    MOE_RETURN_IF_ERROR(WriteManifest(o, plan));
    MOE_RETURN_IF_ERROR(maybe_delete());
    res.complete = true;
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.peak_rss_bytes = PeakRss();
  return res;
}

}  // namespace moe
