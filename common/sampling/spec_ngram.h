// Prompt-lookup (n-gram) drafts: the longest suffix of the sequence (at most
// max_n tokens, at least 1) that occurred before proposes the tokens that
// followed its latest earlier occurrence (up to k). Free: no weights, O(n * max_n).
// *matched (when given): the length of the suffix that matched (0: no draft);
// longer matches are accepted more often, so auto weighs them apart.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace moe {

std::vector<int32_t> NgramDraft(std::span<const int32_t> seq, int k, int max_n = 4, int* matched = nullptr);

}  // namespace moe
