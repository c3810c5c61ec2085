#include "common/format/safetensors_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/base/atomic_file.h"
#include "common/base/status.h"
#include "common/format/safetensors_header.h"
#include "nlohmann/json.hpp"

namespace moe {

uint64_t TensorSpec::Bytes() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n * static_cast<uint64_t>(DTypeSize(dtype));
}

absl::StatusOr<SafetensorsFileLayout> LayOutSafetensors(const std::vector<TensorSpec>& tensors,
                                                        const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::set<std::string> seen;
  SafetensorsFileLayout out;
  std::vector<uint64_t> rel;
  uint64_t off = 0;
  for (const TensorSpec& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || !seen.insert(t.name).second)
      return absl::InvalidArgumentError(absl::StrCat("safetensors writer: bad or duplicate tensor name '", t.name, "'"));
    for (int64_t d : t.shape)
      if (d < 0) return absl::InvalidArgumentError(absl::StrCat("safetensors writer: '", t.name, "' has a negative dim"));
    const uint64_t b = t.Bytes();
    h[t.name] = {{"dtype", std::string(DTypeName(t.dtype))}, {"shape", t.shape}, {"data_offsets", {off, off + b}}};
    rel.push_back(off);
    off += b;
  }
  std::string json = h.dump();
  json.resize((json.size() + 7) / 8 * 8, ' ');
  if (json.size() > kMaxHeaderBytes) return absl::InvalidArgumentError("safetensors writer: header too large");
  const uint64_t n = json.size();
  out.header.resize(kHeaderPrefixBytes);
  for (int i = 0; i < 8; ++i) out.header[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out.header += json;
  for (uint64_t r : rel) out.offsets.push_back(out.header.size() + r);
  out.file_bytes = out.header.size() + off;
  return out;
}

namespace {
absl::Status Errno(std::string_view what, const std::string& path) { return ErrnoStatus(what, path); }
}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsFileWriter>> SafetensorsFileWriter::Create(const std::string& path,
                                                                                    SafetensorsFileLayout layout) {
  std::unique_ptr<SafetensorsFileWriter> w(new SafetensorsFileWriter());
  w->path_ = path;
  w->fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w->fd_ < 0) return Errno("create", path);
  if (::ftruncate(w->fd_, static_cast<off_t>(layout.file_bytes)) != 0) return Errno("size", path);
  for (size_t i = 0; i < layout.offsets.size(); ++i) {
    const uint64_t end = i + 1 < layout.offsets.size() ? layout.offsets[i + 1] : layout.file_bytes;
    w->sizes_.push_back(end - layout.offsets[i]);
  }
  w->layout_ = std::move(layout);
  MOE_RETURN_IF_ERROR(w->Write(SIZE_MAX, 0, w->layout_.header.data(), w->layout_.header.size()));
  return w;
}

SafetensorsFileWriter::~SafetensorsFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status SafetensorsFileWriter::Write(size_t tensor, uint64_t offset, const void* data, uint64_t n) {
  uint64_t at = offset;
  if (tensor != SIZE_MAX) {  // SIZE_MAX: the header (internal)
    if (tensor >= sizes_.size() || offset + n > sizes_[tensor])
      return absl::OutOfRangeError(absl::StrCat(path_, ": write outside tensor ", tensor));
    at = layout_.offsets[tensor] + offset;
  }
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t k = ::pwrite(fd_, p, std::min<uint64_t>(n, 1u << 30), static_cast<off_t>(at));
    if (k < 0) {
      if (errno == EINTR) continue;
      return Errno("write", path_);
    }
    p += k;
    at += static_cast<uint64_t>(k);
    n -= static_cast<uint64_t>(k);
  }
  return absl::OkStatus();
}

absl::Status SafetensorsFileWriter::Finish() {
  if (fd_ < 0) return absl::OkStatus();
  if (::fsync(fd_) != 0) return Errno("fsync", path_);
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return Errno("close", path_);
  return absl::OkStatus();
}

std::string SafetensorsIndexJson(uint64_t total_size, const std::map<std::string, std::string>& weight_map) {
  nlohmann::ordered_json j;
  j["metadata"] = {{"total_size", total_size}};
  j["weight_map"] = weight_map;
  return j.dump(2) + "\n";
}

}  // namespace moe
