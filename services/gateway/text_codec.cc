#include "services/gateway/text_codec.h"

namespace moe::gateway {

std::string Utf8Assembler::Push(std::string_view bytes) {
  pending_.append(bytes);
  // Find the start of a trailing incomplete sequence (at most 3 bytes back).
  size_t n = pending_.size();
  size_t cut = n;
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    unsigned char c = static_cast<unsigned char>(pending_[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    size_t need = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (need > back) cut = n - back;
    break;
  }
  std::string out = pending_.substr(0, cut);
  pending_.erase(0, cut);
  return out;
}

std::string Utf8Assembler::Flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace moe::gateway
