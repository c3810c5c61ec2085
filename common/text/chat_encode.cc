#include "common/text/chat_encode.h"

#include <algorithm>

#include "common/text/utf8.h"

namespace moe::text {
namespace {

bool IsAllSpace(std::string_view s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size();) {
    int32_t cp;
    const int n = DecodeUtf8(s, i, &cp);
    if (!PyIsSpace(cp)) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

bool OverlapsClient(const RenderedChat& chat, size_t b, size_t e) {
  // client_spans is sorted: find the first span ending after b.
  auto it = std::lower_bound(chat.client_spans.begin(), chat.client_spans.end(), b,
                             [](const std::pair<size_t, size_t>& s, size_t pos) { return s.second <= pos; });
  return it != chat.client_spans.end() && it->first < e;
}

}  // namespace

std::vector<std::string> ChatControlTokens(const Tokenizer& tok, const std::vector<std::string>& literals) {
  std::vector<std::string> out;
  for (const AddedToken& t : tok.added_tokens()) {
    bool in_template = false;
    if (!t.special && !IsAllSpace(t.content)) {
      for (const std::string& l : literals) {
        if (l.find(t.content) != std::string::npos) {
          in_template = true;
          break;
        }
      }
    }
    if (t.special || in_template) out.push_back(t.content);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<int32_t> EncodeRenderedChat(const Tokenizer& tok, const RenderedChat& chat,
                                        const std::vector<std::string>& control_tokens) {
  EncodeOptions normal;
  normal.add_special_tokens = false;
  const std::string_view text = chat.text;
  if (chat.client_spans.empty()) return tok.Encode(text, normal);
  // Control tokens by first byte, longest first (regex alternation of transformers' marker).
  std::vector<const std::string*> by_first[256];
  for (const std::string& t : control_tokens) {
    if (!t.empty()) by_first[static_cast<unsigned char>(t[0])].push_back(&t);
  }
  for (auto& v : by_first) {
    std::stable_sort(v.begin(), v.end(), [](const std::string* a, const std::string* b) { return a->size() > b->size(); });
  }
  std::vector<int32_t> ids;
  size_t seg = 0;  // start of the pending normally-encoded text
  for (size_t i = 0; i < text.size();) {
    const std::string* hit = nullptr;
    for (const std::string* t : by_first[static_cast<unsigned char>(text[i])]) {
      if (text.compare(i, t->size(), *t) == 0) {
        hit = t;
        break;
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    const size_t end = i + hit->size();
    if (OverlapsClient(chat, i, end)) {
      if (i > seg) {
        const auto part = tok.Encode(text.substr(seg, i - seg), normal);
        ids.insert(ids.end(), part.begin(), part.end());
      }
      const TextSpan whole[1] = {{0, end - i}};  // no added token at all inside: plain text
      EncodeOptions plain = normal;
      plain.plain_spans = whole;
      const auto as_text = tok.Encode(text.substr(i, end - i), plain);
      ids.insert(ids.end(), as_text.begin(), as_text.end());
      seg = end;
    }
    i = end;
  }
  if (seg < text.size()) {
    const auto part = tok.Encode(text.substr(seg), normal);
    ids.insert(ids.end(), part.begin(), part.end());
  }
  return ids;
}

}  // namespace moe::text
