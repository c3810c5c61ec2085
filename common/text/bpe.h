// Byte-level BPE model (tokenizer.json "model": {"type": "BPE", ...}).
//
// Problem in numbers: GLM-5's vocab has ~155k tokens and ~150k merges; DeepSeek-V3 128k. A
// prompt of 100k characters is ~25k pieces after pre-tokenization, most of them repeats.
// Design: the vocab is re-keyed from GPT-2 byte-alphabet strings to raw bytes at load, so a
// piece is looked up without re-encoding; merges are a hash map (left id, right id) ->
// (rank, merged id); the merge loop takes the lowest (rank, position) pair each step
// (naive scan for short pieces, a heap for long ones -- both equal HF's algorithm); a
// per-instance cache maps recent pieces to their ids.
// `ignore_merges`: a piece found whole in the vocab is one token (Llama-3/GLM).
// Unsupported (error naming the field): dropout, continuing_subword_prefix,
// end_of_word_suffix, byte_fallback, vocab tokens spelled outside the byte alphabet are
// kept for decode but cannot be produced by encode (as in HF).
// Thread safety: Encode is const and may run from many threads; the cache is guarded by a
// reader/writer lock and bounded (kCacheCapacity entries; when full, no more inserts).
#pragma once

#include <cstdint>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace moe::text {

class BpeModel {
 public:
  static constexpr size_t kCacheCapacity = 1 << 16;
  static constexpr size_t kMaxCachedPieceBytes = 256;

  static absl::StatusOr<std::unique_ptr<BpeModel>> FromJson(const nlohmann::json& model);

  // Appends the ids of one pre-tokenized piece (raw UTF-8 bytes).
  void Encode(std::string_view piece, std::vector<int32_t>* ids) const;

  // Token string as stored in tokenizer.json (byte-alphabet form); empty if unknown id.
  const std::string& IdToToken(int32_t id) const;
  int32_t TokenToId(std::string_view token) const;  // -1 if absent
  size_t vocab_size() const { return id_to_token_.size(); }
  size_t num_merges() const { return merges_.size(); }

 private:
  BpeModel() = default;
  void MergeWord(std::string_view piece, std::vector<int32_t>* ids) const;

  std::vector<std::string> id_to_token_;                 // indexed by id (may have holes = "")
  absl::flat_hash_map<std::string, int32_t> token_to_id_;  // byte-alphabet form
  absl::flat_hash_map<std::string, int32_t> bytes_to_id_;  // raw-byte form
  int32_t byte_id_[256];                                   // id of each single byte, -1 if none
  absl::flat_hash_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (l<<32|r) -> (rank, id)
  bool ignore_merges_ = false;
  int32_t unk_id_ = -1;

  mutable std::shared_mutex cache_mu_;
  mutable absl::flat_hash_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace moe::text
