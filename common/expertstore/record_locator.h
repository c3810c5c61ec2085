// RecordLocator: where each expert record lives on disk.
//
// The expert store is independent of the container format: it asks a
// locator for (layer, expert) -> {file, offset, length, crc32c, part
// offsets}. The container reader (common/format) gets an adapter; until it
// lands, and for tests, a small text manifest describes the records
// (ManifestLocator, below).
//
// Contract: records are contiguous; offset is 4 KiB aligned (O_DIRECT);
// length is the number of meaningful bytes (the read covers
// AlignUp(length, 4096), which may run past EOF for the last record);
// crc32c covers exactly `length` bytes (unmasked value). Parts are the
// offsets of the matrices/scales inside the record (gate, up, down, ...).
//
// Thread safety: const methods are safe to call concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace moe::expertstore {

inline constexpr int kMaxParts = 8;

struct RecordLocation {
  uint32_t file = 0;  // index into RecordLocator::files()
  uint64_t offset = 0;
  uint64_t length = 0;
  uint32_t crc32c = 0;
  uint32_t num_parts = 0;
  uint64_t part_offsets[kMaxParts] = {};
};

class RecordLocator {
 public:
  virtual ~RecordLocator() = default;
  virtual int num_layers() const = 0;   // layer ids are 0 .. num_layers-1
  virtual int num_experts() const = 0;  // expert ids per layer 0 .. num_experts-1
  // Model identity (tags persisted heat); stable across restarts.
  virtual std::string model_id() const = 0;
  virtual const std::vector<std::string>& files() const = 0;
  // InvalidArgument for an id out of range, NotFound for a layer without
  // routed experts (dense layer).
  virtual absl::StatusOr<RecordLocation> Locate(int layer, int expert) const = 0;
};

// Text manifest, one item per line ('#' comments):
//   moestream-expert-manifest 1
//   model <id>
//   shape <num_layers> <num_experts>
//   file <index> <path>            (relative paths are relative to the manifest)
//   rec <layer> <expert> <file> <offset> <length> <crc32c hex> [part offsets...]
class ManifestLocator final : public RecordLocator {
 public:
  static absl::StatusOr<std::unique_ptr<ManifestLocator>> Load(const std::string& path);
  // Writes a manifest (temp file + fsync + rename).
  static absl::Status Write(const std::string& path, const std::string& model_id, int num_layers,
                            int num_experts, const std::vector<std::string>& files,
                            const std::vector<std::pair<std::pair<int, int>, RecordLocation>>& recs);

  int num_layers() const override { return num_layers_; }
  int num_experts() const override { return num_experts_; }
  std::string model_id() const override { return model_id_; }
  const std::vector<std::string>& files() const override { return files_; }
  absl::StatusOr<RecordLocation> Locate(int layer, int expert) const override;

 private:
  std::string model_id_;
  int num_layers_ = 0;
  int num_experts_ = 0;
  std::vector<std::string> files_;
  std::vector<RecordLocation> recs_;  // layer * num_experts + expert
  std::vector<uint8_t> present_;
};

}  // namespace moe::expertstore
