#include "common/text/jinja/tstring.h"

#include <algorithm>

namespace moe::text::jinja {

void TString::AddSpan(uint32_t b, uint32_t e) {
  if (b >= e) return;
  if (!taint_.empty() && taint_.back().end >= b) {
    if (e > taint_.back().end) taint_.back().end = e;
    return;
  }
  taint_.push_back({b, e});
}

void TString::Append(const TString& o) {
  RenderBudget::Charge(o.s_.size());
  const uint32_t off = static_cast<uint32_t>(s_.size());
  s_ += o.s_;
  for (const TaintSpan& t : o.taint_) AddSpan(t.begin + off, t.end + off);
}

void TString::Append(std::string_view s, bool tainted) {
  RenderBudget::Charge(s.size());
  const uint32_t off = static_cast<uint32_t>(s_.size());
  s_.append(s);
  if (tainted) AddSpan(off, static_cast<uint32_t>(s_.size()));
}

TString TString::Sub(size_t begin, size_t end) const {
  TString out;
  if (end > s_.size()) end = s_.size();
  if (begin >= end) return out;
  RenderBudget::Charge(end - begin);
  out.s_.assign(s_, begin, end - begin);
  for (const TaintSpan& t : taint_) {
    const size_t b = std::max<size_t>(t.begin, begin), e = std::min<size_t>(t.end, end);
    if (b < e) out.AddSpan(static_cast<uint32_t>(b - begin), static_cast<uint32_t>(e - begin));
  }
  return out;
}

void TString::TaintAll() {
  taint_.clear();
  if (!s_.empty()) taint_.push_back({0, static_cast<uint32_t>(s_.size())});
}

std::vector<uint32_t> CodePointOffsets(std::string_view s) {
  RenderBudget::Charge((s.size() + 1) * sizeof(uint32_t));
  std::vector<uint32_t> out;
  out.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) out.push_back(static_cast<uint32_t>(i));
  }
  out.push_back(static_cast<uint32_t>(s.size()));
  return out;
}

size_t CodePointCount(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

}  // namespace moe::text::jinja
