#include "common/text/detokenizer.h"

#include "common/text/utf8.h"

namespace moe::text {

std::string StreamDetokenizer::Push(int32_t id) {
  tok_.AppendTokenBytes(id, skip_special_, &pending_);
  const size_t tail = IncompleteUtf8Tail(pending_);
  const std::string_view ready(pending_.data(), pending_.size() - tail);
  std::string out = IsValidUtf8(ready) ? std::string(ready) : SanitizeUtf8(ready);
  pending_.erase(0, pending_.size() - tail);
  return out;
}

std::string StreamDetokenizer::Finish() {
  std::string out = SanitizeUtf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace moe::text
