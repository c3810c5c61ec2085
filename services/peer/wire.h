// Row encoding of the ExpertPeer protocol (proto/peer.proto): f32 rows go
// as bf16 bits when every value is exactly a bf16 (the HF-bf16 numerics'
// activations and expert outputs: half the bytes, no change), else as f32.
// Little-endian hosts only (x86-64, aarch64), as the rest of the project.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/model/bf16.h"

namespace moe::peer {

// Sets exactly one of *bf16 / *f32 to the encoding of v[0, n).
inline void EncodeRows(const float* v, size_t n, std::string* bf16, std::string* f32) {
  bool exact = true;  // bitwise: -0.0 and NaN payloads must survive too
  for (size_t i = 0; i < n && exact; ++i) {
    const float back = BF16BitsToF32(F32ToBF16Bits(v[i]));
    exact = std::memcmp(&back, &v[i], sizeof(float)) == 0;
  }
  bf16->clear();
  f32->clear();
  if (exact) {
    bf16->resize(n * 2);
    for (size_t i = 0; i < n; ++i) {
      const uint16_t b = F32ToBF16Bits(v[i]);
      std::memcpy(bf16->data() + 2 * i, &b, 2);
    }
  } else {
    f32->assign(reinterpret_cast<const char*>(v), n * sizeof(float));
  }
}

// The n values of whichever encoding is set; InvalidArgument naming `what`
// when both or neither are, or the size is not n values.
inline absl::StatusOr<std::vector<float>> DecodeRows(const std::string& bf16, const std::string& f32, size_t n,
                                                     const char* what) {
  if (!bf16.empty() == !f32.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": exactly one of the bf16 and f32 encodings must be set"));
  }
  std::vector<float> out(n);
  if (!bf16.empty()) {
    if (bf16.size() != n * 2) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", bf16.size(), " bytes of bf16, want ", n * 2));
    }
    for (size_t i = 0; i < n; ++i) {
      uint16_t b;
      std::memcpy(&b, bf16.data() + 2 * i, 2);
      out[i] = BF16BitsToF32(b);
    }
  } else {
    if (f32.size() != n * 4) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", f32.size(), " bytes of f32, want ", n * 4));
    }
    std::memcpy(out.data(), f32.data(), n * 4);
  }
  return out;
}

}  // namespace moe::peer
