// Read-only view of a Hugging Face checkpoint directory: config.json plus
// model.safetensors or model.safetensors.index.json + shards. Files are
// mmapped; tensors are exposed zero-copy with their safetensors dtype.
//
// (Minimal reader private to the engine; the full safetensors reader with all
// dtype decoders lives in common/format once merged.)
// Thread safety: immutable after Open; Find/ToF32 are safe concurrently.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace moe {

struct TensorRef {
  std::string name;
  std::string dtype;  // "BF16", "F32", "F16", "F8_E4M3"
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  int64_t bytes = 0;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

class HfCheckpoint {
 public:
  static absl::StatusOr<std::unique_ptr<HfCheckpoint>> Open(const std::string& dir);
  // One .safetensors file.
  static absl::StatusOr<std::unique_ptr<HfCheckpoint>> OpenFile(const std::string& path);
  ~HfCheckpoint();
  HfCheckpoint(const HfCheckpoint&) = delete;
  HfCheckpoint& operator=(const HfCheckpoint&) = delete;

  const std::string& dir() const { return dir_; }
  // nullptr if absent.
  const TensorRef* Find(const std::string& name) const;
  const std::map<std::string, TensorRef>& tensors() const { return tensors_; }
  int64_t total_bytes() const;

 private:
  HfCheckpoint() = default;
  absl::Status AddFile(const std::string& path);
  struct Mapping {
    void* addr = nullptr;
    size_t size = 0;
  };
  std::string dir_;
  std::vector<Mapping> maps_;
  std::map<std::string, TensorRef> tensors_;
};

// Decodes `n` elements of a tensor in dtype into f32.
absl::Status DecodeToF32(const std::string& dtype, const uint8_t* src, int64_t n, float* out);

}  // namespace moe
