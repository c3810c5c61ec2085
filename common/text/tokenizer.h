// Hugging Face tokenizer.json (byte-level BPE) in C++: encode and decode exactly as the
// `tokenizers` library does (goldens in tests/data/text/goldens, made by
// tools/text/make_goldens.py).
//
// Pipeline of Encode (HF's order): sanitize UTF-8 (see utf8.h: ill-formed bytes become
// U+FFFD, as HF sees bytes.decode('utf-8','replace')) -> split out added tokens that are
// matched on raw text (normalized=false) -> normalize the rest -> split out added tokens
// matched on normalized text -> pre-tokenize -> BPE per piece -> post-processor
// (TemplateProcessing / Roberta / Bert / ByteLevel) when add_special_tokens.
// Added-token matching is leftmost-longest with HF's single_word / lstrip / rstrip rules.
// parse_special=false is HF's `encode_special_tokens=True`: special added tokens are then
// plain text (non-special added tokens still match).
// plain_spans: byte ranges of the input in which no added token at all is matched (the
// client's text inside a chat prompt: a user typing "<|assistant|>" must not produce the
// control token). A match overlapping a span is refused; the text is BPE'd as plain bytes.
// The whole input is still encoded in one pass, so with no added-token text inside the
// spans the ids equal HF's. (Where a normalizer changes the text of a piece that a span
// touches, the piece is split at the span's edges and each part normalized alone.)
// Decode: ids -> token strings (added tokens by content; special ones dropped with
// skip_special) -> ByteLevel decoder (per token: byte-alphabet chars -> bytes, or the
// token's own UTF-8 when it has other chars) -> lossy UTF-8 (U+FFFD per maximal subpart).
// Unknown ids are skipped (as HF). Any unsupported component is an error naming it.
// Known limit: Unicode tables come from PCRE2 10.42 / ICU 72 (Unicode 14/15); HF uses
// Oniguruma and Rust crates with their own Unicode versions, so code points assigned in
// recent Unicode versions may be classified differently (none in the goldens).
// Thread safety: a loaded Tokenizer is immutable except for the BPE piece cache, which is
// internally locked; Encode/Decode may be called from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/text/text_span.h"

namespace moe::text {

class BpeModel;
class Normalizer;
class PreTokenizer;

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool normalized = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

struct EncodeOptions {
  bool parse_special = true;       // match special added tokens in the text
  bool add_special_tokens = true;  // run the post-processor (e.g. add BOS)
  std::span<const TextSpan> plain_spans = {};  // sorted, non-overlapping: no added tokens inside
};

class Tokenizer {
 public:
  // `path` is a tokenizer.json, or a gzip'd one when it ends in ".gz".
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::string& path);
  // `origin` names the source in errors.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view json_text, std::string_view origin);
  ~Tokenizer();

  std::vector<int32_t> Encode(std::string_view text, const EncodeOptions& opt = {}) const;
  std::string Decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // The bytes token `id` contributes to Decode's output before UTF-8 repair (empty for
  // unknown ids and, with skip_special, special tokens). Streaming builds on this.
  void AppendTokenBytes(int32_t id, bool skip_special, std::string* out) const;

  // Added tokens first, then the model vocab; -1 if absent.
  int32_t TokenToId(std::string_view token) const;
  // Token string as in tokenizer.json (byte-alphabet form for vocab tokens); "" if unknown.
  std::string IdToToken(int32_t id) const;
  bool IsSpecial(int32_t id) const;
  // One past the largest id (model vocab and added tokens).
  size_t vocab_size() const { return vocab_size_; }
  const std::vector<AddedToken>& added_tokens() const { return added_; }

 private:
  struct Matcher;
  struct PostStep;
  Tokenizer();
  // `base`: offset of `text` in the input the plain spans refer to.
  void SplitAdded(std::string_view text, const Matcher& m, bool parse_special, size_t base,
                  std::span<const TextSpan> plain, std::vector<std::pair<std::string_view, int32_t>>* out) const;
  void ApplyPost(std::vector<int32_t>* ids) const;

  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::vector<AddedToken> added_;
  absl::flat_hash_map<int32_t, size_t> added_by_id_;
  absl::flat_hash_map<std::string, int32_t> added_by_content_;
  std::unique_ptr<Matcher> raw_matcher_, norm_matcher_;
  std::vector<PostStep> post_;
  size_t vocab_size_ = 0;
};

}  // namespace moe::text
