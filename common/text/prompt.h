// A rendered chat prompt that remembers which of its bytes came from the client.
//
// Why: the template writes control tokens as text ("<|user|>", "<tool_call>") and the
// tokenizer turns that text into control ids. If the client's own text went through the
// same pass, a user typing "<|assistant|>" or "<|endoftext|>" would forge turns. Renderers
// build the prompt with Markup() for the template's text and Client() for everything the
// request supplied (message content, reasoning, names, tool definitions, tool-call names
// and arguments, tool results); the tokenizer is given client_spans as
// EncodeOptions::plain_spans and matches no added token inside them.
// Rule for renderers (the C++ ones in chat.cc and any template engine): a string derived
// from the request is Client(), even when it is spliced into a marker; literals of the
// template are Markup(); values the server validated against a fixed set (roles) may be
// Markup().
// Thread safety: plain value types.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/text/text_span.h"

namespace moe::text {

struct ChatPrompt {
  std::string text;
  std::vector<TextSpan> client_spans;  // sorted, non-overlapping, adjacent ones merged
};

class ChatPromptBuilder {
 public:
  void Markup(std::string_view s) { p_.text.append(s); }
  void Client(std::string_view s) {
    if (s.empty()) return;
    const size_t b = p_.text.size();
    p_.text.append(s);
    if (!p_.client_spans.empty() && p_.client_spans.back().end == b) {
      p_.client_spans.back().end = p_.text.size();
    } else {
      p_.client_spans.push_back({b, p_.text.size()});
    }
  }
  ChatPrompt Take() { return std::move(p_); }

 private:
  ChatPrompt p_;
};

}  // namespace moe::text
