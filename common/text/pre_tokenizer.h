// tokenizer.json "pre_tokenizer" components: split normalized text into pieces that BPE
// encodes independently.
//
// Supported: Sequence, Split (String/Regex pattern; behavior Removed, Isolated,
// MergedWithPrevious, MergedWithNext, Contiguous; invert), ByteLevel (add_prefix_space,
// use_regex with GPT-2's pattern; trim_offsets only affects offsets, which we do not
// produce), Digits (individual_digits), Whitespace, WhitespaceSplit. Others are an
// Unimplemented error naming the type. The byte-to-character mapping of ByteLevel is done
// by the BPE model on raw bytes (its vocab is re-keyed to bytes at load), so pre-tokenizers
// only split.
// Thread safety: immutable after construction; PreTokenize is const and reentrant.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace moe::text {

// Pieces are views into the caller's text or into strings owned by `arena`.
struct Pieces {
  std::vector<std::string_view> list;
  std::deque<std::string>* arena = nullptr;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces each piece in `in` by its sub-pieces, appending to `out`.
  virtual void Split(const std::vector<std::string_view>& in, Pieces* out) const = 0;
  virtual bool has_byte_level() const { return false; }
};

absl::StatusOr<std::unique_ptr<PreTokenizer>> MakePreTokenizer(const nlohmann::json& j);

// Runs `pt` over one piece of text (nullptr pt -> the text itself).
void RunPreTokenizer(const PreTokenizer* pt, std::string_view text, std::deque<std::string>* arena,
                     std::vector<std::string_view>* out);

}  // namespace moe::text
