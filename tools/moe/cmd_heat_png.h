// Minimal PNG writer (8-bit RGB, no compression: zlib "stored" deflate
// blocks). Enough for heat maps of 75 x 256 cells without a libpng
// dependency. Written with temp file + rename.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace moe::cli {

// rgb: height rows of width * 3 bytes.
absl::Status WritePng(const std::string& path, uint32_t width, uint32_t height, const std::vector<uint8_t>& rgb);
// Encodes to bytes (for tests).
std::vector<uint8_t> EncodePng(uint32_t width, uint32_t height, const std::vector<uint8_t>& rgb);

}  // namespace moe::cli
