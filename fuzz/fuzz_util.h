// Shared by the fuzz targets: split one input into "cuts" so a target can feed a stream
// parser the same bytes in the pieces a network or a model would.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace moe::fuzz {

// The first byte of the input picks the piece size (1..64; 0 means the whole input at
// once); the rest is the data, cut into pieces of that size.
inline std::vector<std::string_view> Cuts(const uint8_t* data, size_t size, std::string_view* all = nullptr) {
  std::vector<std::string_view> out;
  if (size == 0) return out;
  const size_t step = data[0] % 65;
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  if (all) *all = rest;
  if (step == 0) {
    out.push_back(rest);
    return out;
  }
  for (size_t i = 0; i < rest.size(); i += step) out.push_back(rest.substr(i, step));
  return out;
}

}  // namespace moe::fuzz
