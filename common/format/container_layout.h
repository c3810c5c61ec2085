// Byte layout of one moestream container shard (docs/CONTAINER.md is the
// prose spec; this file and container.cc are its only implementation).
//
// Problem in numbers: GLM-5 with q4_g64 experts is ~390 GB in ~100 shards;
// each routed expert (gate + up + down + scales = 19.5 MB) must be ONE
// contiguous 4 KiB-aligned record so expertd fetches it with one O_DIRECT
// read, while every shard stays a valid safetensors file.
//
// A shard is: [u64 N][N bytes JSON header, space-padded so 8 + N is a
// multiple of 4096][data section]. In the data section: first the non-expert
// tensors, each blob (data, scales) 64-byte aligned; then the expert records,
// each starting 4096-aligned, holding gate.data, gate.scales, up.data,
// up.scales, down.data, down.scales (each 64-byte aligned) and padded to a
// multiple of 4096. Every gap is covered by an explicit U8 tensor
// "__pad__.<k>" (safetensors requires contiguous tensors), and the data
// section ends 4096-aligned.
//
// Header metadata ("__metadata__", all values strings) carries the container
// magic/version, the model identity, the conversion plan id, and two JSON
// documents: "moestream.tensors" (logical name -> format, shape, role, layer,
// physical data/scale tensor names, masked CRC32C) and "moestream.records"
// (layer, expert, offset relative to the data section, length, masked CRC32C,
// part names). CRCs are rendered as 8 hex digits so the header has the same
// length before and after the data is written.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/format/qformat.h"
#include "common/format/tensor_role.h"

namespace moe {

inline constexpr std::string_view kContainerMagic = "moestream-container";
inline constexpr int kContainerVersion = 1;
inline constexpr uint64_t kRecordAlign = 4096;  // O_DIRECT granule
inline constexpr uint64_t kBlobAlign = 64;      // SIMD loads
inline constexpr std::string_view kManifestFileName = "moestream.json";
inline constexpr std::string_view kScaleTensorSuffix = ".qscale";
inline constexpr std::string_view kPadTensorPrefix = "__pad__.";

inline constexpr std::string_view kMetaMagic = "moestream.magic";
inline constexpr std::string_view kMetaVersion = "moestream.version";
inline constexpr std::string_view kMetaModel = "moestream.model";
inline constexpr std::string_view kMetaPlan = "moestream.plan";
inline constexpr std::string_view kMetaShard = "moestream.shard";
inline constexpr std::string_view kMetaTensors = "moestream.tensors";
inline constexpr std::string_view kMetaRecords = "moestream.records";

static_assert(kRecordAlign % kBlobAlign == 0);
static_assert((kRecordAlign & (kRecordAlign - 1)) == 0);

// Rows/cols of the 2-D view of a logical shape: [r, c] -> (r, c); [n] -> (1, n);
// [a, b, c] -> (a*b, c). InvalidArgument for empty shapes or zero sizes.
absl::Status MatrixDims(const std::vector<int64_t>& shape, int64_t* rows, int64_t* cols);

struct LayoutTensor {
  std::string name;  // logical name (the checkpoint's), also the data tensor's name
  TensorClass cls;
  QFormat format = QFormat::kF32;
  std::vector<int64_t> shape;  // logical shape
  int64_t rows = 0, cols = 0;
  // Filled by LayOutShard, relative to the data section:
  uint64_t data_offset = 0, data_bytes = 0;
  uint64_t scales_offset = 0, scales_bytes = 0;  // 0 bytes for f32/bf16
  uint32_t crc = 0;  // masked CRC32C of data bytes followed by scale bytes
};

struct LayoutRecord {
  int layer = 0, expert = 0;
  int parts[3] = {-1, -1, -1};  // indices into ShardLayout::tensors: gate, up, down
  uint64_t offset = 0;          // relative to the data section, multiple of 4096
  uint64_t length = 0;          // multiple of 4096 (padding included)
  uint32_t crc = 0;             // masked CRC32C of all `length` bytes
};

struct ShardLayout {
  std::vector<LayoutTensor> tensors;
  std::vector<LayoutRecord> records;
  uint64_t data_bytes = 0;  // size of the data section (multiple of 4096)
  std::map<std::string, std::string> metadata;  // caller's keys (model, plan, shard)
  std::string pad_prefix = "__pad__.";  // padding tensor names: <pad_prefix><k>; unique per shard
  uint64_t header_bytes = 0;  // N, fixed by the first RenderHeader
  uint64_t data_start() const { return 8 + header_bytes; }
  uint64_t file_bytes() const { return data_start() + data_bytes; }
};

// Places `tensors` (records' parts are referenced by index and must not be
// placed twice) and `records`; fills offsets and sizes. InvalidArgument if a
// record part has the wrong role or a tensor is used twice.
absl::StatusOr<ShardLayout> LayOutShard(std::vector<LayoutTensor> tensors,
                                        std::vector<LayoutRecord> records,
                                        std::map<std::string, std::string> metadata);

// The full safetensors header (8-byte length + JSON + space padding) with the
// current CRCs. The first call fixes header_bytes; later calls produce the
// same length (CRCs are fixed-width) or Internal if they would not.
absl::StatusOr<std::string> RenderHeader(ShardLayout* layout);

// Physical safetensors dtype name and shape of a logical tensor's data blob.
std::string_view DataDType(QFormat f);
std::vector<int64_t> DataShape(const LayoutTensor& t);

// "%08x" and its inverse.
std::string Hex32(uint32_t v);
bool ParseHex32(std::string_view s, uint32_t* v);

}  // namespace moe
