// A per-sequence constraint on the tokens a sequence may generate next (structured outputs:
// a JSON schema, a regex, a grammar, tool calls). The sampler only sees its mask; the batcher
// owns one per constrained sequence, fills the mask before each draw and accepts the drawn
// token after it. Implementation: common/structured/grammar_constraint.h (xgrammar).
//
// Mask: one bit per vocabulary id, bit (t % 32) of word t / 32 set = token t is legal.
// Speculation (verify over K drafts + 1): FillDraftMasks gives the mask of every position in
// one call and leaves the state as it was; ForcedToken names the one legal token when there
// is exactly one (a draft that needs no model).
// Thread safety: one sequence, one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"

namespace moe {

inline size_t MaskWords(int32_t vocab) { return (static_cast<size_t>(vocab) + 31) / 32; }
inline bool MaskAllows(std::span<const uint32_t> mask, int32_t t) {
  return (mask[static_cast<size_t>(t) >> 5] >> (t & 31)) & 1u;
}

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  virtual int32_t vocab_size() const = 0;
  // Legal next tokens after everything accepted so far, into MaskWords(vocab_size()) words.
  // Returns false when every token is legal (the mask need not be applied).
  virtual bool FillMask(std::span<uint32_t> mask) = 0;
  // Advances by one token; InvalidArgument when it is illegal here (state unchanged).
  virtual absl::Status Accept(int32_t token) = 0;
  // Undoes the last n accepted tokens (n <= accepted()).
  virtual void Rollback(int n) = 0;
  virtual int64_t accepted() const = 0;
  // True once a stop token was accepted: the constrained output is complete.
  virtual bool Terminated() const = 0;
  // The one legal next token when exactly one is legal, else -1.
  virtual int32_t ForcedToken() = 0;
  // masks holds (drafts.size() + 1) * MaskWords(vocab) words; masks[i] = the mask after
  // accepting drafts[0..i). Stops at the first illegal draft j (masks 0..j filled) and returns
  // the number of masks filled (drafts.size() + 1 when every draft is legal). The state
  // afterwards equals the state before.
  virtual int FillDraftMasks(std::span<const int32_t> drafts, std::span<uint32_t> masks) = 0;
};

}  // namespace moe
