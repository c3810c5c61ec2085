// A byte range of a text. Chat prompts mark the ranges that came from the client with it
// (prompt.h), and the tokenizer never matches an added (control) token inside them.
#pragma once

#include <cstddef>

namespace moe::text {

struct TextSpan {
  size_t begin = 0;  // [begin, end) bytes
  size_t end = 0;
  bool operator==(const TextSpan&) const = default;
};

}  // namespace moe::text
