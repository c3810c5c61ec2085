#include "common/format/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/format/safetensors_header.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Bytes of raw data read and decoded per slab in ReadRowsF32: bounds the
// temporary memory and keeps the slab in L2 between pread and decode.
constexpr uint64_t kDecodeSlabBytes = 1ull << 20;

absl::Status ErrnoError(int err, std::string_view what, std::string_view path) {
  const std::string msg = absl::StrCat(AV(what), " ", AV(path), ": ", std::strerror(err));
  if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::UnavailableError(msg);
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Reads exactly len bytes at offset with pread, retrying on EINTR and short
// reads. A premature EOF is DataLoss (the file shrank since Open).
absl::Status PreadFull(int fd, uint64_t offset, uint64_t len, uint8_t* dst, std::string_view path) {
  uint64_t done = 0;
  while (done < len) {
    const ssize_t r = ::pread(fd, dst + done, len - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, "pread", path);
    }
    if (r == 0) {
      return absl::DataLossError(absl::StrCat(AV(path), ": unexpected end of file at byte ", offset + done,
                                              " (wanted ", offset + len, "; file truncated?)"));
    }
    done += static_cast<uint64_t>(r);
  }
  return absl::OkStatus();
}

// A shard name from an index must stay inside the checkpoint directory.
bool SafeRelativeName(const std::string& name) {
  if (name.empty() || name[0] == '/') return false;
  for (const auto& part : fs::path(name)) {
    if (part == "..") return false;
  }
  return true;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

// ---- TensorInfo -------------------------------------------------------------

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}
int64_t TensorInfo::rows() const { return shape.empty() ? 1 : shape[0]; }
int64_t TensorInfo::row_elems() const {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

// ---- Open -------------------------------------------------------------------

SafetensorsReader::~SafetensorsReader() {
  for (File& f : files_) {
    if (f.fd >= 0) ::close(f.fd);
    if (f.direct_fd >= 0) ::close(f.direct_fd);
  }
}

absl::Status SafetensorsReader::AddFile(const std::string& path, const OpenOptions& options) {
  File& f = files_.emplace_back();
  f.info.path = path;
  // O_NONBLOCK: a FIFO named as a shard must fail the S_ISREG check, not hang.
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (f.fd < 0) return ErrnoError(errno, "cannot open", path);
  struct stat st;
  if (::fstat(f.fd, &st) != 0) return ErrnoError(errno, "cannot stat", path);
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  f.info.size = static_cast<uint64_t>(st.st_size);

  char prefix[kHeaderPrefixBytes] = {};
  const uint64_t prefix_len = std::min<uint64_t>(kHeaderPrefixBytes, f.info.size);
  MOE_RETURN_IF_ERROR(PreadFull(f.fd, 0, prefix_len, reinterpret_cast<uint8_t*>(prefix), path));
  MOE_ASSIGN_OR_RETURN(const uint64_t header_len,
                       ParseHeaderLength(std::string_view(prefix, prefix_len), f.info.size, path));
  std::string text(header_len, '\0');
  MOE_RETURN_IF_ERROR(
      PreadFull(f.fd, kHeaderPrefixBytes, header_len, reinterpret_cast<uint8_t*>(text.data()), path));
  MOE_ASSIGN_OR_RETURN(ParsedHeader h, ParseSafetensorsHeader(text, f.info.size, path));

  f.info.data_offset = h.data_offset;
  f.info.metadata = std::move(h.metadata);
  const int file_index = static_cast<int>(files_.size()) - 1;
  f.tensor_indices.reserve(h.tensors.size());
  for (HeaderTensor& ht : h.tensors) {
    const int index = static_cast<int>(tensors_.size());
    auto [it, inserted] = by_name_.try_emplace(ht.name, index);
    if (!inserted) {
      const TensorInfo& other = tensors_[it->second];
      return absl::DataLossError(absl::StrCat(path, ": tensor '", ht.name, "' also appears in ",
                                              files_[other.file].info.path));
    }
    TensorInfo& t = tensors_.emplace_back();
    t.name = std::move(ht.name);
    t.dtype = ht.dtype;
    t.shape = std::move(ht.shape);
    t.file = file_index;
    t.offset = h.data_offset + ht.begin;
    t.nbytes = ht.end - ht.begin;
    f.tensor_indices.push_back(index);
  }

  if (options.direct_io) {
    // Refused on some file systems (tmpfs: EINVAL); ReadRangeDirect then
    // falls back to the buffered descriptor.
    f.direct_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SafetensorsReader>> SafetensorsReader::Open(const std::string& path,
                                                                           const OpenOptions& options) {
  std::unique_ptr<SafetensorsReader> r(new SafetensorsReader());
  r->path_ = path;

  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", path, " does not exist"));
  }
  std::string index_path;
  if (fs::is_directory(st)) {
    const fs::path candidate = fs::path(path) / std::string(kIndexFileName);
    if (fs::exists(candidate, ec)) {
      index_path = candidate.string();
    } else {
      std::vector<std::string> shards;
      for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
        if (EndsWith(it->path().filename().string(), ".safetensors") && it->is_regular_file(ec)) {
          shards.push_back(it->path().string());
        }
      }
      if (ec) return ErrnoError(ec.value(), "cannot list", path);
      if (shards.empty()) {
        return absl::NotFoundError(
            absl::StrCat(path, ": no ", AV(kIndexFileName), " and no *.safetensors files in the directory"));
      }
      std::sort(shards.begin(), shards.end());
      for (const std::string& s : shards) MOE_RETURN_IF_ERROR(r->AddFile(s, options));
    }
  } else if (EndsWith(path, ".index.json")) {
    index_path = path;
  } else {
    MOE_RETURN_IF_ERROR(r->AddFile(path, options));
  }

  if (!index_path.empty()) {
    // Sharded: {"metadata": {...}, "weight_map": {"tensor": "shard.safetensors", ...}}
    const int fd = ::open(index_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoError(errno, "cannot open", index_path);
    struct stat ist;
    std::string text;
    absl::Status read_status;
    if (::fstat(fd, &ist) != 0) {
      read_status = ErrnoError(errno, "cannot stat", index_path);
    } else if (static_cast<uint64_t>(ist.st_size) > kMaxHeaderBytes) {
      read_status = absl::DataLossError(absl::StrCat(index_path, ": index is ", ist.st_size, " bytes, over the ",
                                                     kMaxHeaderBytes, "-byte limit"));
    } else {
      text.resize(static_cast<size_t>(ist.st_size));
      read_status = PreadFull(fd, 0, text.size(), reinterpret_cast<uint8_t*>(text.data()), index_path);
    }
    ::close(fd);
    MOE_RETURN_IF_ERROR(read_status);

    json doc;
    try {
      doc = json::parse(text);
    } catch (const json::exception& e) {
      return absl::DataLossError(absl::StrCat(index_path, ": malformed JSON: ", e.what()));
    }
    if (!doc.is_object() || !doc.contains("weight_map") || !doc["weight_map"].is_object()) {
      return absl::DataLossError(absl::StrCat(index_path, ": no \"weight_map\" object"));
    }
    const json& wm = doc["weight_map"];
    std::map<std::string, std::string> shard_names;  // shard -> first tensor naming it
    for (auto it = wm.begin(); it != wm.end(); ++it) {
      if (!it->is_string()) {
        return absl::DataLossError(
            absl::StrCat(index_path, ": weight_map[\"", it.key(), "\"] is not a string"));
      }
      const std::string& shard = it->get_ref<const std::string&>();
      if (!SafeRelativeName(shard)) {
        return absl::DataLossError(absl::StrCat(index_path, ": tensor '", it.key(), "' names shard \"", shard,
                                                "\", which is not a relative path inside the checkpoint"));
      }
      shard_names.emplace(shard, it.key());
    }
    const fs::path dir = fs::path(index_path).parent_path();
    std::map<std::string, int> shard_file;  // shard name -> file index
    for (const auto& [shard, first_tensor] : shard_names) {
      const std::string shard_path = (dir / shard).string();
      if (!fs::exists(shard_path, ec)) {
        return absl::NotFoundError(absl::StrCat(index_path, ": shard ", shard, " (named for tensor '",
                                                first_tensor, "') is missing: ", shard_path, " does not exist"));
      }
      shard_file[shard] = r->num_files();
      MOE_RETURN_IF_ERROR(r->AddFile(shard_path, options));
    }
    for (auto it = wm.begin(); it != wm.end(); ++it) {
      const std::string& shard = it->get_ref<const std::string&>();
      const TensorInfo* t = r->Find(it.key());
      const int want = shard_file[shard];
      if (t == nullptr || t->file != want) {
        return absl::DataLossError(absl::StrCat(index_path, ": weight_map puts tensor '", it.key(), "' in ", shard,
                                                ", but ", r->files_[want].info.path, " does not contain it"));
      }
    }
  }

  if (options.check_fp8_scales) MOE_RETURN_IF_ERROR(r->CheckFp8Scales());
  return r;
}

absl::Status SafetensorsReader::CheckFp8Scales() const {
  for (const TensorInfo& t : tensors_) {
    if (t.dtype != DType::kF8E4M3 || !EndsWith(t.name, ".weight")) continue;
    const std::string& path = files_[t.file].info.path;
    if (t.ndim() != 2) {
      return absl::DataLossError(absl::StrCat(path, ": tensor '", t.name, "' is F8_E4M3 with ", t.ndim(),
                                              " dims; block-scaled FP8 weights must be 2-D"));
    }
    const TensorInfo* s = ScaleOf(t);
    if (s == nullptr) {
      return absl::DataLossError(absl::StrCat(path, ": tensor '", t.name, "' is F8_E4M3 but its block scales '",
                                              t.name, AV(kScaleInvSuffix), "' are missing"));
    }
    const int64_t want_r = CeilDiv(t.shape[0], kFp8BlockSize);
    const int64_t want_c = CeilDiv(t.shape[1], kFp8BlockSize);
    if (s->ndim() != 2 || s->shape[0] != want_r || s->shape[1] != want_c) {
      std::string got;
      for (int64_t d : s->shape) absl::StrAppend(&got, got.empty() ? "" : ", ", d);
      return absl::DataLossError(absl::StrCat(files_[s->file].info.path, ": scale tensor '", s->name, "' has shape [",
                                              got, "], expected [", want_r, ", ", want_c, "] for '", t.name,
                                              "' [", t.shape[0], ", ", t.shape[1], "]"));
    }
    if (s->dtype != DType::kF32 && s->dtype != DType::kBF16 && s->dtype != DType::kF16) {
      return absl::DataLossError(absl::StrCat(files_[s->file].info.path, ": scale tensor '", s->name,
                                              "' has dtype ", AV(DTypeName(s->dtype)), "; expected F32 (or BF16/F16)"));
    }
  }
  return absl::OkStatus();
}

// ---- catalogue --------------------------------------------------------------

const TensorInfo* SafetensorsReader::Find(std::string_view name) const {
  auto it = by_name_.find(AV(name));
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

absl::StatusOr<const TensorInfo*> SafetensorsReader::Get(std::string_view name) const {
  const TensorInfo* t = Find(name);
  if (t == nullptr) {
    return absl::NotFoundError(absl::StrCat("tensor '", AV(name), "' not found in checkpoint ", path_));
  }
  return t;
}

const TensorInfo* SafetensorsReader::ScaleOf(const TensorInfo& t) const {
  if (t.dtype != DType::kF8E4M3) return nullptr;
  return Find(absl::StrCat(t.name, AV(kScaleInvSuffix)));
}

// ---- raw reads --------------------------------------------------------------

absl::Status SafetensorsReader::CheckRange(int file, uint64_t offset, uint64_t len) const {
  if (file < 0 || file >= num_files()) {
    return absl::InvalidArgumentError(absl::StrCat("file index ", file, " out of range (", num_files(), " files)"));
  }
  const ShardFile& f = files_[file].info;
  if (offset > f.size || len > f.size - offset) {
    return absl::OutOfRangeError(absl::StrCat(f.path, ": read [", offset, ", +", len,
                                              ") beyond the file (", f.size, " bytes)"));
  }
  return absl::OkStatus();
}

absl::Status SafetensorsReader::ReadRange(int file, uint64_t offset, uint64_t len, void* dst) const {
  MOE_RETURN_IF_ERROR(CheckRange(file, offset, len));
  const File& f = files_[file];
  return PreadFull(f.fd, offset, len, static_cast<uint8_t*>(dst), f.info.path);
}

absl::StatusOr<std::span<const uint8_t>> SafetensorsReader::ReadRangeDirect(int file, uint64_t offset,
                                                                            uint64_t len,
                                                                            AlignedBuffer* buf) const {
  MOE_RETURN_IF_ERROR(CheckRange(file, offset, len));
  const File& f = files_[file];
  if (len == 0) return std::span<const uint8_t>();
  const uint64_t begin = offset / kDirectIoAlign * kDirectIoAlign;
  const uint64_t end = AlignUp(offset + len, kDirectIoAlign);
  const uint64_t span = end - begin;
  const uint64_t need = offset + len - begin;  // bytes from `begin` we must have
  if (buf->capacity() < span || reinterpret_cast<uintptr_t>(buf->data()) % kDirectIoAlign != 0) {
    *buf = AlignedBuffer(span, kDirectIoAlign);
  }
  uint8_t* dst = buf->data();
  uint64_t done = 0;
  int fd = f.direct_fd >= 0 ? f.direct_fd : f.fd;
  while (done < need) {
    // O_DIRECT needs aligned offset and length; after an unaligned short read
    // (only possible at EOF) or a refusal, finish with the buffered fd.
    if (fd == f.direct_fd && done % kDirectIoAlign != 0) fd = f.fd;
    const uint64_t want = (fd == f.direct_fd) ? span - done : need - done;
    const ssize_t r = ::pread(fd, dst + done, want, static_cast<off_t>(begin + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EINVAL && fd == f.direct_fd) {
        fd = f.fd;
        continue;
      }
      return ErrnoError(errno, "pread", f.info.path);
    }
    if (r == 0) {
      return absl::DataLossError(absl::StrCat(f.info.path, ": unexpected end of file at byte ", begin + done,
                                              " (wanted ", offset + len, "; file truncated?)"));
    }
    done += static_cast<uint64_t>(r);
  }
  return std::span<const uint8_t>(dst + (offset - begin), len);
}

absl::Status SafetensorsReader::ReadTensorRaw(const TensorInfo& t, void* dst) const {
  return ReadRange(t.file, t.offset, t.nbytes, dst);
}

absl::StatusOr<std::vector<uint8_t>> SafetensorsReader::ReadTensorBytes(std::string_view name) const {
  MOE_ASSIGN_OR_RETURN(const TensorInfo* t, Get(name));
  std::vector<uint8_t> out(t->nbytes);
  MOE_RETURN_IF_ERROR(ReadTensorRaw(*t, out.data()));
  return out;
}

absl::StatusOr<std::span<const uint8_t>> SafetensorsReader::ReadTensorDirect(const TensorInfo& t,
                                                                             AlignedBuffer* buf) const {
  return ReadRangeDirect(t.file, t.offset, t.nbytes, buf);
}

// ---- decoded reads ----------------------------------------------------------

absl::Status SafetensorsReader::ReadRowsF32(const TensorInfo& t, int64_t row_begin, int64_t row_end,
                                            float* dst) const {
  if (row_begin < 0 || row_begin > row_end || row_end > t.rows()) {
    return absl::OutOfRangeError(absl::StrCat("tensor '", t.name, "': rows [", row_begin, ", ", row_end,
                                              ") outside [0, ", t.rows(), ")"));
  }
  if (const TensorInfo* scale = ScaleOf(t)) return Fp8RowsF32(t, *scale, row_begin, row_end, dst);

  const int64_t elem = DTypeSize(t.dtype);
  const int64_t first = row_begin * t.row_elems();
  const int64_t count = (row_end - row_begin) * t.row_elems();
  if (t.dtype == DType::kF32) {
    return ReadRange(t.file, t.offset + static_cast<uint64_t>(first * elem), static_cast<uint64_t>(count * elem),
                     dst);
  }
  const int64_t slab = std::max<int64_t>(1, static_cast<int64_t>(kDecodeSlabBytes) / elem);
  auto raw = std::make_unique_for_overwrite<uint8_t[]>(static_cast<size_t>(std::min(count, slab) * elem));
  for (int64_t done = 0; done < count;) {
    const int64_t n = std::min(slab, count - done);
    MOE_RETURN_IF_ERROR(ReadRange(t.file, t.offset + static_cast<uint64_t>((first + done) * elem),
                                  static_cast<uint64_t>(n * elem), raw.get()));
    DecodeToF32(t.dtype, raw.get(), n, dst + done);
    done += n;
  }
  return absl::OkStatus();
}

absl::Status SafetensorsReader::Fp8RowsF32(const TensorInfo& t, const TensorInfo& scale, int64_t row_begin,
                                           int64_t row_end, float* dst) const {
  const std::string& path = files_[t.file].info.path;
  if (t.ndim() != 2) {
    return absl::DataLossError(absl::StrCat(path, ": FP8 tensor '", t.name, "' with block scales must be 2-D"));
  }
  const int64_t cols = t.shape[1];
  const int64_t sr = CeilDiv(t.shape[0], kFp8BlockSize);
  const int64_t sc = CeilDiv(cols, kFp8BlockSize);
  if (scale.ndim() != 2 || scale.shape[0] != sr || scale.shape[1] != sc || scale.dtype == DType::kF8E4M3) {
    return absl::DataLossError(absl::StrCat(files_[scale.file].info.path, ": scale tensor '", scale.name,
                                            "' does not match '", t.name, "' (want float [", sr, ", ", sc, "])"));
  }
  if (row_begin == row_end || cols == 0) return absl::OkStatus();
  const int64_t block_first = row_begin / kFp8BlockSize;
  const int64_t block_last = (row_end - 1) / kFp8BlockSize;
  std::vector<float> s(static_cast<size_t>((block_last - block_first + 1) * sc));
  MOE_RETURN_IF_ERROR(ReadRowsF32(scale, block_first, block_last + 1, s.data()));

  const int64_t slab_rows = std::max<int64_t>(1, static_cast<int64_t>(kDecodeSlabBytes) / std::max<int64_t>(cols, 1));
  auto q = std::make_unique_for_overwrite<uint8_t[]>(static_cast<size_t>(std::min(slab_rows, row_end - row_begin) * cols));
  for (int64_t r0 = row_begin; r0 < row_end;) {
    const int64_t n = std::min(slab_rows, row_end - r0);
    MOE_RETURN_IF_ERROR(
        ReadRange(t.file, t.offset + static_cast<uint64_t>(r0 * cols), static_cast<uint64_t>(n * cols), q.get()));
    float* out = dst + (r0 - row_begin) * cols;
    DecodeToF32(DType::kF8E4M3, q.get(), n * cols, out);  // exact codes, then scale per block
    for (int64_t i = 0; i < n; ++i, out += cols) {
      const float* srow = s.data() + ((r0 + i) / kFp8BlockSize - block_first) * sc;
      for (int64_t c0 = 0, b = 0; c0 < cols; c0 += kFp8BlockSize, ++b) {
        const int64_t c1 = std::min(cols, c0 + kFp8BlockSize);
        const float scale_b = srow[b];
        for (int64_t c = c0; c < c1; ++c) out[c] *= scale_b;
      }
    }
    r0 += n;
  }
  return absl::OkStatus();
}

absl::Status SafetensorsReader::ReadTensorF32(const TensorInfo& t, float* dst) const {
  return ReadRowsF32(t, 0, t.rows(), dst);
}

absl::StatusOr<std::vector<float>> SafetensorsReader::ReadTensorF32(std::string_view name) const {
  MOE_ASSIGN_OR_RETURN(const TensorInfo* t, Get(name));
  std::vector<float> out(static_cast<size_t>(t->numel()));
  MOE_RETURN_IF_ERROR(ReadTensorF32(*t, out.data()));
  return out;
}

}  // namespace moe
