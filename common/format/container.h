// Reader of a moestream container directory (docs/CONTAINER.md).
//
// Problem in numbers: a GLM-5 container is ~100 shards, ~92k logical
// tensors, 19,968 routed-expert records of ~19.5 MB (q4_g64). expertd looks
// records up by (layer, expert) and reads each with ONE O_DIRECT read into a
// 4 KiB-aligned slab; inferd maps the dense tensors. Lookups are hash maps
// built once at Open from the shard headers (a few MB of JSON).
//
// Contract:
//   - Open(dir) requires the manifest moestream.json (written last by
//     `moe convert`: no manifest = conversion not finished ->
//     FailedPrecondition). Every shard header is validated: magic, version,
//     that each logical tensor's data/scale tensors exist with the dtype,
//     shape and byte size implied by its format tag, that each record is
//     4096-aligned, holds its three parts and lies inside the file. Any
//     violation is DataLoss naming the file and the tensor.
//   - All offsets returned are absolute file offsets.
//   - ReadRecord / ReadTensor verify the stored CRC32C (DataLoss on mismatch).
// Thread safety: immutable after Open; all const methods may be called
// concurrently.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/base/aligned_buffer.h"
#include "common/format/container_layout.h"
#include "common/format/safetensors.h"

namespace moe {

struct ContainerTensor {
  std::string name;  // logical (checkpoint) name
  QFormat format = QFormat::kF32;
  std::string role;  // RoleName()
  int layer = -1;
  int expert = -1;
  bool mtp = false;
  std::vector<int64_t> shape;
  int64_t rows = 0, cols = 0;
  int file = 0;
  uint64_t data_offset = 0, data_bytes = 0;      // absolute
  uint64_t scales_offset = 0, scales_bytes = 0;  // absolute; 0 bytes for f32/bf16
  uint32_t crc = 0;                              // masked CRC32C (data then scales)
};

// A view of one quantized matrix inside memory the caller owns.
struct QMatrixView {
  QFormat format = QFormat::kF32;
  int64_t rows = 0, cols = 0;
  const uint8_t* data = nullptr;
  const float* scales = nullptr;  // nullptr for f32/bf16
};

struct ExpertRecordInfo {
  int layer = 0, expert = 0;
  int file = 0;
  uint64_t offset = 0;  // absolute, multiple of 4096
  uint64_t length = 0;  // multiple of 4096
  uint32_t crc = 0;     // masked CRC32C of the `length` bytes
  struct Part {
    const ContainerTensor* tensor = nullptr;
    uint64_t data_offset = 0, scales_offset = 0;  // relative to the record start
  };
  std::array<Part, 3> parts;  // gate_proj, up_proj, down_proj
};

// Container-level identity (from the manifest).
struct ContainerInfo {
  int version = 0;
  std::string model_type;
  int num_hidden_layers = 0;
  int n_routed_experts = 0;
  std::string policy;
  std::string plan;                 // the serving plan id it was converted for ("" if none)
  std::vector<std::string> shards;  // file names, in order
};

// Parses and validates moestream.json (`path` labels errors): DataLoss naming what is wrong.
absl::StatusOr<ContainerInfo> ParseContainerManifest(std::string_view text, const std::string& path);

class Container {
 public:
  static absl::StatusOr<std::unique_ptr<Container>> Open(const std::string& dir);

  const ContainerInfo& info() const { return info_; }
  const std::vector<ContainerTensor>& tensors() const { return tensors_; }
  const std::vector<ExpertRecordInfo>& records() const { return records_; }
  const ContainerTensor* Find(std::string_view name) const;
  const ExpertRecordInfo* FindExpert(int layer, int expert) const;
  const std::string& file_path(int file) const { return reader_->file(file).path; }
  const SafetensorsReader& reader() const { return *reader_; }

  // Reads the whole record into *buf (4 KiB-aligned, grown if needed) with
  // one O_DIRECT read and verifies its CRC. Returns the record's bytes.
  absl::StatusOr<std::span<const uint8_t>> ReadRecord(const ExpertRecordInfo& r,
                                                      AlignedBuffer* buf) const;
  // The three matrices of a record read by ReadRecord.
  static std::array<QMatrixView, 3> ViewRecord(const ExpertRecordInfo& r, const uint8_t* record);

  // A tensor's stored bytes (data then scales), CRC-checked.
  absl::Status ReadTensor(const ContainerTensor& t, std::vector<uint8_t>* data,
                          std::vector<float>* scales) const;
  // Dequantized to float32 (rows * cols values).
  absl::StatusOr<std::vector<float>> ReadTensorF32(const ContainerTensor& t) const;

  // A tensor's stored bytes mapped read-only from its shard (MAP_SHARED: every
  // process that maps the same container shares one copy in the page cache, so
  // N workers hold the ~20 GB resident set of GLM-5 once). Blobs are 64-byte
  // aligned in the file. Pages are not touched here: they fault in on use.
  //
  // CRC-checked once per shard and machine: the first MapTensor of a shard
  // checks every non-expert tensor of it (read with pread, under an flock so
  // workers starting together wait for one check instead of repeating it)
  // and leaves a stamp in DIR/.moestream-verified/ (the shard's size, mtime,
  // inode, device and the plan id); later processes that find a valid stamp
  // skip the check. Embedding tables are dropped from the page cache after
  // their check: a token reads one row, so they need not stay resident. A
  // failed tensor is DataLoss naming it (no stamp; the others still map).
  // Without a writable DIR every process checks.
  // `keep` holds the mapping; it may outlive the Container. The shard must not
  // be truncated while mapped (SIGBUS), which `moe convert` never does to a
  // finished container.
  struct MappedTensor {
    const uint8_t* data = nullptr;
    const float* scales = nullptr;  // null when the format has none
    std::shared_ptr<const void> keep;
  };
  absl::StatusOr<MappedTensor> MapTensor(const ContainerTensor& t) const;

  // What the resident checks cost this process.
  struct VerifyStats {
    int shards_checked = 0;   // checked here
    int shards_stamped = 0;   // skipped: a valid stamp from an earlier process
    uint64_t bytes_checked = 0;
    double seconds = 0;       // in checks (or waiting for another process's)
  };
  VerifyStats verify_stats() const;

 private:
  Container() = default;
  ContainerInfo info_;
  std::unique_ptr<SafetensorsReader> reader_;
  std::vector<ContainerTensor> tensors_;
  std::vector<ExpertRecordInfo> records_;
  absl::flat_hash_map<std::string, int> by_name_;
  absl::flat_hash_map<int64_t, int> by_expert_;
  // Checks every non-expert tensor of `file` once (or finds a stamp).
  absl::Status EnsureChecked(int file) const;

  std::string dir_;
  std::string plan_;  // the manifest's plan id (part of the stamps)
  // Whole-shard mappings, made on first MapTensor (thread-safe).
  mutable std::mutex map_mu_;
  mutable std::vector<std::shared_ptr<const void>> maps_;
  // Once-per-shard checks (thread-safe).
  mutable std::mutex check_mu_;
  mutable std::vector<bool> checked_;
  mutable absl::flat_hash_map<int, absl::Status> bad_;  // tensor index -> its CRC failure
  mutable VerifyStats verify_stats_;
};

// Parses and validates the moestream metadata of file `file` of `reader`
// (tensors and records with absolute offsets). Used by Container::Open and
// by `moe convert` to verify finished shards on resume.
struct ShardContents {
  std::string plan;  // moestream.plan
  std::vector<ContainerTensor> tensors;
  struct Record {
    int layer, expert;
    uint64_t offset, length;
    uint32_t crc;
    std::array<int, 3> parts;  // indices into tensors
  };
  std::vector<Record> records;
};
absl::StatusOr<ShardContents> ReadShardContents(const SafetensorsReader& reader, int file);

// Recomputes every tensor and record CRC of file `file` (reads it all).
absl::Status VerifyShardData(const SafetensorsReader& reader, int file,
                             const ShardContents& contents);

}  // namespace moe
