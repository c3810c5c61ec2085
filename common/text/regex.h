// PCRE2 (UTF + UCP, JIT-compiled) wrapper for the split patterns of tokenizer.json files.
//
// Hugging Face compiles these with Oniguruma; the patterns in use (GPT-2/GPT-4 style:
// \p{L}, \p{N}, (?i:...), \s+(?!\S), explicit code point ranges) mean the same in PCRE2.
// FindAll follows onig's find_iter: non-overlapping, left to right, and an empty match
// right where the previous match ended is skipped by advancing one character.
// Input must be valid UTF-8 (the tokenizer sanitizes first); it is not re-checked.
// Thread safety: a compiled Regex is immutable; FindAll may run concurrently (match data
// is per thread).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace moe::text {

class Regex {
 public:
  // Compiles `pattern`; the error names the pattern and PCRE2's message and offset.
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(std::string_view pattern);
  // Same, for a literal string (HF `{"String": ...}` patterns).
  static absl::StatusOr<std::unique_ptr<Regex>> Literal(std::string_view literal);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends [start, end) byte offsets of every match.
  void FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const;
  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

}  // namespace moe::text
