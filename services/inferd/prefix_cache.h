// Prefix KV reuse: KV states of finished sequences, looked up by the longest
// common token prefix with a new prompt.
//
// Numbers: a chat's system prompt + history is often most of the next
// request's prompt (thousands of tokens); reusing its KV skips that much
// prefill. States are kept up to `max_bytes` (SeqState::bytes), least
// recently used dropped first. Lookup is a linear scan over the entries
// (tens of entries, token compare at memory speed).
// A hit never covers the whole prompt: at least one prompt token is fed so
// the step that samples the first token has logits.
// Thread safety: not thread-safe (the batcher thread owns it).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <vector>

#include "services/inferd/sequence_model.h"

namespace moe::inferd {

class PrefixCache {
 public:
  explicit PrefixCache(int64_t max_bytes) : max_bytes_(max_bytes) {}

  // `tokens` are exactly the tokens fed into `state` (state->length()).
  void Insert(std::vector<int32_t> tokens, std::shared_ptr<const SeqState> state);

  struct Hit {
    int64_t tokens = 0;
    std::shared_ptr<const SeqState> state;
  };
  Hit Lookup(const std::vector<int32_t>& prompt);

  // Lowers (or raises) the budget, dropping least recently used entries now.
  void SetMaxBytes(int64_t max_bytes);
  int64_t max_bytes() const { return max_bytes_; }
  int64_t bytes() const { return bytes_; }
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    std::shared_ptr<const SeqState> state;
    int64_t bytes = 0;
  };
  int64_t max_bytes_;
  int64_t bytes_ = 0;
  std::list<Entry> entries_;  // most recently used first
};

}  // namespace moe::inferd
