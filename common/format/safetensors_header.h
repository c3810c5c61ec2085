// Parsing and validation of ONE safetensors header (no I/O here, so the
// fuzzer and the corruption tests can drive it from memory).
//
// File layout (https://github.com/huggingface/safetensors):
//   [u64 little-endian N][N bytes of JSON header][data section]
// The JSON is an object mapping tensor name -> {"dtype": "BF16",
// "shape": [d0, d1, ...], "data_offsets": [begin, end]} (offsets relative to
// the data section, end exclusive), plus an optional "__metadata__" object of
// string -> string. Trailing spaces pad the header.
//
// Validation (each failure is a DataLoss status naming the file and, where
// there is one, the tensor): N beyond the file or above kMaxHeaderBytes;
// JSON that is malformed, not an object, or nested deeper than the schema;
// unknown dtype; shape not a list of non-negative integers, or whose element
// count x dtype size overflows or differs from end - begin; begin > end;
// end beyond the data section; two tensors' byte ranges overlapping; a
// metadata value that is not a string. Gaps between tensors are allowed
// (moestream containers pad records to 4 KiB).
//
// Thread safety: pure function.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/format/dtype.h"

namespace moe {

// A header above this is treated as corrupt (the reference implementation
// uses the same 100 MB bound; GLM-5's largest shard header is ~100 KB).
inline constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
// Bytes of the little-endian header-length prefix.
inline constexpr uint64_t kHeaderPrefixBytes = 8;
// Most dimensions a tensor may have.
inline constexpr int kMaxTensorDims = 16;

struct HeaderTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // relative to the data section
  uint64_t end = 0;    // exclusive
};

struct ParsedHeader {
  uint64_t header_bytes = 0;  // N
  uint64_t data_offset = 0;   // 8 + N: absolute offset of the data section
  uint64_t data_bytes = 0;    // file_size - data_offset
  std::vector<HeaderTensor> tensors;  // sorted by (begin, end, name)
  std::map<std::string, std::string> metadata;  // "__metadata__"
};

// Checks the length prefix against the file size. `prefix` holds the first 8
// bytes of the file (fewer if the file is shorter).
absl::StatusOr<uint64_t> ParseHeaderLength(std::string_view prefix, uint64_t file_size,
                                           std::string_view path);

// Parses and validates the JSON header `json` (exactly N bytes) of a file of
// `file_size` bytes. `path` only labels error messages.
absl::StatusOr<ParsedHeader> ParseSafetensorsHeader(std::string_view json, uint64_t file_size,
                                                    std::string_view path);

}  // namespace moe
