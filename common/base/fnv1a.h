// FNV-1a, 64 bit: the project's stable hash of small keys (token-id prefixes,
// vocabulary texts, model identities). Unlike absl::Hash its values are the
// same in every process and build, so they may name files and travel between
// processes. Not for integrity (that is CRC32C, common/format/crc32c.h) and not
// for adversarial keys. Multi-byte values are mixed least significant byte
// first on every host.
// Thread safety: a value type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace moe {

class Fnv1a64 {
 public:
  static constexpr uint64_t kOffset = 1469598103934665603ull;
  static constexpr uint64_t kPrime = 1099511628211ull;

  void Byte(uint8_t b) { h_ = (h_ ^ b) * kPrime; }
  void U32(uint32_t v) {
    for (int i = 0; i < 4; ++i) Byte(static_cast<uint8_t>(v >> (8 * i)));
  }
  void U64(uint64_t v) {
    for (int i = 0; i < 8; ++i) Byte(static_cast<uint8_t>(v >> (8 * i)));
  }
  void Bytes(std::string_view s) {
    for (unsigned char c : s) Byte(c);
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = kOffset;
};

}  // namespace moe
