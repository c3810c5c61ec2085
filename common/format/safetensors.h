// Reader for safetensors checkpoints: one file, or a sharded Hugging Face
// checkpoint directory (model.safetensors.index.json + shards).
//
// Problem in numbers: GLM-5.x FP8 is ~756 GB in ~140 shards of ~5 GB holding
// ~90k tensors; the biggest single tensors (embed_tokens, lm_head) are 1.9 GB
// in BF16. So: headers are parsed once at Open (a few MB of JSON in total),
// every tensor is found through one hash map, and data is never mapped or
// slurped; callers read exact byte ranges (pread) into their own buffers,
// optionally with O_DIRECT into 4 KiB-aligned buffers, or decode row ranges
// of a tensor to float32 a slab at a time.
//
// Contract:
//   - Open validates every header (see safetensors_header.h for the list)
//     and the index (every weight_map entry names an existing shard that
//     holds that tensor; a tensor name appears in only one shard), and, with
//     OpenOptions::check_fp8_scales, that every F8_E4M3 tensor named
//     "*.weight" is 2-D and has a float "<name>_scale_inv" tensor of shape
//     [ceil(rows/128), ceil(cols/128)] (docs/MODEL.md §3). Any violation is a
//     DataLoss status naming the file and tensor; a missing path is NotFound.
//   - Tensors in a shard that the index's weight_map does not list are still
//     indexed (the weight_map is checked, not trusted to be complete).
//   - TensorInfo::offset is the ABSOLUTE byte offset in its file, so
//     ReadRange(t.file, t.offset, t.nbytes, dst) reads the tensor.
//   - Reads never go past the file: a range outside it is OutOfRange; a file
//     that shrank after Open is DataLoss.
//   - FP8 dequantization: W[r, c] = float(q[r, c]) * S[r / 128, c / 128],
//     computed in float32 (bit-identical to torch's q.float() * s).
//
// Thread safety: after Open the reader is immutable; all methods are const
// and may be called concurrently from any number of threads (reads use
// pread on descriptors opened once; no shared seek position or cache).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/base/aligned_buffer.h"
#include "common/format/dtype.h"

namespace moe {

// Block size of FP8 weight scales (quantization_config.weight_block_size).
inline constexpr int64_t kFp8BlockSize = 128;
// Suffix appended to an FP8 weight's name to find its block scales.
inline constexpr std::string_view kScaleInvSuffix = "_scale_inv";
// Name of the shard index file in a sharded checkpoint directory.
inline constexpr std::string_view kIndexFileName = "model.safetensors.index.json";

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  int file = 0;         // index into SafetensorsReader::file()
  uint64_t offset = 0;  // absolute byte offset of the first element in the file
  uint64_t nbytes = 0;  // numel() * DTypeSize(dtype)

  int ndim() const { return static_cast<int>(shape.size()); }
  int64_t numel() const;
  // Rows = shape[0] (1 for a scalar); RowElems = numel / rows (1 for a scalar;
  // 0 when some dim is 0).
  int64_t rows() const;
  int64_t row_elems() const;
};

struct ShardFile {
  std::string path;       // as opened (index dir + shard name for sharded)
  uint64_t size = 0;      // bytes, at Open
  uint64_t data_offset = 0;  // 8 + header length
  std::map<std::string, std::string> metadata;  // the header's "__metadata__"
};

struct OpenOptions {
  // Check FP8 "*.weight" tensors for their "_scale_inv" block scales.
  bool check_fp8_scales = true;
  // Also open every shard with O_DIRECT for ReadRangeDirect. If the file
  // system refuses O_DIRECT (tmpfs), ReadRangeDirect falls back to buffered
  // pread with the same aligned-buffer semantics; direct_io_active() says
  // which one a file uses.
  bool direct_io = true;
};

class SafetensorsReader {
 public:
  // `path` is a .safetensors file; a *.index.json file; or a directory
  // holding model.safetensors.index.json (then exactly the shards its
  // weight_map names are opened), or else one or more *.safetensors files
  // (all are opened, in name order). Header parsing costs ~5 us per tensor
  // (nlohmann_json; ~0.5 s for a 90k-tensor GLM-5 checkpoint).
  static absl::StatusOr<std::unique_ptr<SafetensorsReader>> Open(const std::string& path,
                                                                 const OpenOptions& options = {});
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  // ---- catalogue ----
  // All tensors, ordered by (file, offset, name).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // nullptr if absent.
  const TensorInfo* Find(std::string_view name) const;
  // NotFound naming the tensor and the checkpoint if absent.
  absl::StatusOr<const TensorInfo*> Get(std::string_view name) const;
  // The "<name>_scale_inv" tensor of an FP8 tensor, nullptr if none.
  const TensorInfo* ScaleOf(const TensorInfo& t) const;

  int num_files() const { return static_cast<int>(files_.size()); }
  const ShardFile& file(int i) const { return files_[i].info; }
  // "__metadata__" of file i (file 0 for single-file checkpoints).
  const std::map<std::string, std::string>& metadata(int i = 0) const { return files_[i].info.metadata; }
  // Indices into tensors() of the tensors stored in file i, by offset.
  std::span<const int> tensors_in_file(int i) const { return files_[i].tensor_indices; }
  // Whether ReadRangeDirect on file i really bypasses the page cache.
  bool direct_io_active(int i) const { return files_[i].direct_fd >= 0; }
  // The path given to Open.
  const std::string& path() const { return path_; }

  // ---- raw reads ----
  // Reads bytes [offset, offset + len) of file i into dst (buffered pread).
  absl::Status ReadRange(int file, uint64_t offset, uint64_t len, void* dst) const;
  // Reads the aligned superset [AlignDown(offset), AlignUp(offset + len)) of
  // the range with O_DIRECT into *buf (grown if too small; reused as is
  // otherwise) and returns the exact requested sub-span inside *buf.
  absl::StatusOr<std::span<const uint8_t>> ReadRangeDirect(int file, uint64_t offset, uint64_t len,
                                                           AlignedBuffer* buf) const;
  // A whole tensor's stored bytes; dst holds t.nbytes.
  absl::Status ReadTensorRaw(const TensorInfo& t, void* dst) const;
  absl::StatusOr<std::vector<uint8_t>> ReadTensorBytes(std::string_view name) const;
  absl::StatusOr<std::span<const uint8_t>> ReadTensorDirect(const TensorInfo& t, AlignedBuffer* buf) const;

  // ---- decoded reads (float32) ----
  // Rows [row_begin, row_end) of t (rows = shape[0]) as float32 into dst
  // ((row_end - row_begin) * t.row_elems() floats). F8_E4M3 tensors that
  // have a "_scale_inv" tensor are dequantized with it; other dtypes are
  // widened exactly (integers via C++ conversion).
  absl::Status ReadRowsF32(const TensorInfo& t, int64_t row_begin, int64_t row_end, float* dst) const;
  // The whole tensor; dst holds t.numel() floats.
  absl::Status ReadTensorF32(const TensorInfo& t, float* dst) const;
  absl::StatusOr<std::vector<float>> ReadTensorF32(std::string_view name) const;

 private:
  struct File {
    ShardFile info;
    int fd = -1;
    int direct_fd = -1;
    std::vector<int> tensor_indices;
  };
  SafetensorsReader() = default;
  // The file index exists and [offset, offset + len) lies inside that file.
  absl::Status CheckRange(int file, uint64_t offset, uint64_t len) const;
  absl::Status AddFile(const std::string& path, const OpenOptions& options);
  absl::Status CheckFp8Scales() const;
  absl::Status Fp8RowsF32(const TensorInfo& t, const TensorInfo& scale, int64_t row_begin, int64_t row_end,
                          float* dst) const;

  std::string path_;
  std::vector<File> files_;
  std::vector<TensorInfo> tensors_;
  absl::flat_hash_map<std::string, int> by_name_;
};

}  // namespace moe
