#include "services/inferd/prefix_cache.h"

#include <algorithm>

namespace moe::inferd {

void PrefixCache::Insert(std::vector<int32_t> tokens, std::shared_ptr<const SeqState> state) {
  if (!state || tokens.empty() || static_cast<int64_t>(tokens.size()) != state->length()) return;
  const int64_t b = state->bytes();
  if (b > max_bytes_) return;
  // An entry that is a prefix of the new one is redundant.
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->tokens.size() <= tokens.size() && std::equal(it->tokens.begin(), it->tokens.end(), tokens.begin())) {
      bytes_ -= it->bytes;
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  entries_.push_front({std::move(tokens), std::move(state), b});
  bytes_ += b;
  while (bytes_ > max_bytes_ && !entries_.empty()) {
    bytes_ -= entries_.back().bytes;
    entries_.pop_back();
  }
}

void PrefixCache::SetMaxBytes(int64_t max_bytes) {
  max_bytes_ = std::max<int64_t>(0, max_bytes);
  while (bytes_ > max_bytes_ && !entries_.empty()) {
    bytes_ -= entries_.back().bytes;
    entries_.pop_back();
  }
}

PrefixCache::Hit PrefixCache::Lookup(const std::vector<int32_t>& prompt) {
  Hit best;
  auto best_it = entries_.end();
  const size_t limit = prompt.empty() ? 0 : prompt.size() - 1;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    size_t n = std::min(limit, it->tokens.size());
    size_t k = 0;
    while (k < n && it->tokens[k] == prompt[k]) ++k;
    if (static_cast<int64_t>(k) > best.tokens) {
      best.tokens = static_cast<int64_t>(k);
      best.state = it->state;
      best_it = it;
    }
  }
  if (best_it != entries_.end()) entries_.splice(entries_.begin(), entries_, best_it);
  return best;
}

}  // namespace moe::inferd
