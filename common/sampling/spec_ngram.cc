#include "common/sampling/spec_ngram.h"

#include <algorithm>

namespace moe {

std::vector<int32_t> NgramDraft(std::span<const int32_t> seq, int k, int max_n, int* matched) {
  const int64_t n = static_cast<int64_t>(seq.size());
  std::vector<int32_t> out;
  if (matched) *matched = 0;
  if (k < 1 || n < 2) return out;
  for (int64_t len = std::min<int64_t>(max_n, n - 1); len >= 1; --len) {
    const auto suffix = seq.subspan(n - len);
    // Latest earlier occurrence that has at least one token after it.
    for (int64_t start = n - len - 1; start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), seq.begin() + start)) continue;
      for (int64_t j = start + len; j < n && static_cast<int>(out.size()) < k; ++j) out.push_back(seq[j]);
      if (matched) *matched = static_cast<int>(len);
      return out;
    }
  }
  return out;
}

}  // namespace moe
