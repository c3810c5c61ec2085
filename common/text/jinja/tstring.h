// A UTF-8 string that remembers which of its bytes came from the client (message content,
// tool definitions and results, kwargs) rather than from the template or the model's files.
// The chat-template engine carries one on every string value, so that the rendered prompt
// can tell the tokenizer where control tokens may not be matched (chat_template.h).
//
// Taint is a sorted list of disjoint, non-adjacent byte ranges. Operations that keep bytes
// in place (concatenation, slicing, strip, split, replace) keep their taint exactly; ones
// that rewrite characters (case mapping, formatting, JSON) taint their whole result when any
// input byte was tainted -- wider taint only turns a control token into text, never the
// other way round.
// Thread safety: a value type.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "common/text/jinja/budget.h"

namespace moe::text::jinja {

struct TaintSpan {
  uint32_t begin = 0;
  uint32_t end = 0;  // exclusive
  bool operator==(const TaintSpan&) const = default;
};

class TString {
 public:
  TString() = default;
  explicit TString(std::string s, bool tainted = false) : s_(std::move(s)) {
    RenderBudget::Charge(s_.size());
    if (tainted && !s_.empty()) taint_.push_back({0, static_cast<uint32_t>(s_.size())});
  }
  // Copies are charged to the render's work budget (budget.h); moves are free.
  TString(const TString& o) : s_((RenderBudget::Charge(o.s_.size()), o.s_)), taint_(o.taint_) {}
  TString(TString&&) noexcept = default;
  TString& operator=(const TString& o) {
    if (this != &o) {
      RenderBudget::Charge(o.s_.size());
      s_ = o.s_;
      taint_ = o.taint_;
    }
    return *this;
  }
  TString& operator=(TString&&) noexcept = default;

  const std::string& str() const { return s_; }
  std::string_view view() const { return s_; }
  size_t size() const { return s_.size(); }
  bool empty() const { return s_.empty(); }
  // One span inline: a client string is one span, and renders make many of them.
  using Spans = absl::InlinedVector<TaintSpan, 1>;
  const Spans& taint() const { return taint_; }
  bool any_taint() const { return !taint_.empty(); }

  void Append(const TString& o);
  void Append(std::string_view s, bool tainted = false);
  // Bytes [begin, end) with their taint.
  TString Sub(size_t begin, size_t end) const;
  // Marks everything tainted (used for rewritten text derived from tainted input).
  void TaintAll();
  void Clear() {
    s_.clear();
    taint_.clear();
  }
  std::string Release() { return std::move(s_); }

 private:
  void AddSpan(uint32_t b, uint32_t e);
  std::string s_;
  Spans taint_;
};

// ---- UTF-8 code points (Python str indexes by code point) -------------------------------

// Byte offset of every code point start, plus s.size() at the end (strings here are valid
// UTF-8: the engine sanitizes what it is given). Charged to the render's work budget.
std::vector<uint32_t> CodePointOffsets(std::string_view s);
size_t CodePointCount(std::string_view s);

}  // namespace moe::text::jinja
