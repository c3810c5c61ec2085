// Writing safetensors files tensor by tensor, without holding them in memory
// (the writer side of safetensors.h; `moe synth` uses it for full-size
// checkpoints of ~5 GB shards).
//
// Layout: [u64 LE N][N bytes JSON header, space-padded to a multiple of 8]
// [data section], tensors back to back in the order given (as Python's
// `safetensors` writes them: no gaps). The file is created at its final size
// with ftruncate, so every byte range not written stays a file hole (reads as
// zeros, takes no disk): a tensor whose content is all zeros is simply not
// written.
//
// Thread safety: a SafetensorsFileWriter may be written from several threads
// at once (pwrite at disjoint offsets); Create/Finish are single-threaded.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/format/dtype.h"

namespace moe {

struct TensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t Bytes() const;
};

// Offsets and header text of one file, before anything is written.
struct SafetensorsFileLayout {
  std::string header;              // length prefix + JSON + padding
  std::vector<uint64_t> offsets;   // absolute file offset of each tensor's data
  uint64_t file_bytes = 0;
};

// InvalidArgument for duplicate or empty names and negative dimensions.
absl::StatusOr<SafetensorsFileLayout> LayOutSafetensors(const std::vector<TensorSpec>& tensors,
                                                        const std::map<std::string, std::string>& metadata = {});

class SafetensorsFileWriter {
 public:
  // Creates (truncates) `path` at the layout's full size and writes the header.
  static absl::StatusOr<std::unique_ptr<SafetensorsFileWriter>> Create(const std::string& path,
                                                                       SafetensorsFileLayout layout);
  ~SafetensorsFileWriter();
  SafetensorsFileWriter(const SafetensorsFileWriter&) = delete;
  SafetensorsFileWriter& operator=(const SafetensorsFileWriter&) = delete;

  const SafetensorsFileLayout& layout() const { return layout_; }
  // Writes n bytes at byte `offset` within tensor i's data (bounds-checked).
  absl::Status Write(size_t tensor, uint64_t offset, const void* data, uint64_t n);
  // fsync, drop the file from the page cache (a full-size checkpoint must not
  // evict everything else), close.
  absl::Status Finish();

 private:
  SafetensorsFileWriter() = default;
  std::string path_;
  SafetensorsFileLayout layout_;
  std::vector<uint64_t> sizes_;
  int fd_ = -1;
};

// model.safetensors.index.json text: {"metadata": {"total_size": ...}, "weight_map": {name: file}}.
std::string SafetensorsIndexJson(uint64_t total_size, const std::map<std::string, std::string>& weight_map);

}  // namespace moe
