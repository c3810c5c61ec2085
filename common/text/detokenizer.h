// Streaming detokenizer: turns generated ids into text chunks as they arrive.
//
// Contract: the concatenation of every Push() result and the final Finish() equals
// Tokenizer::Decode(all ids, skip_special) byte for byte, and no chunk ever ends inside a
// UTF-8 sequence (a character spread over several byte tokens is held back until complete;
// at most 3 bytes are held). Ill-formed bytes become U+FFFD exactly where Decode puts them:
// bytes are released once no later byte can change how they decode.
// Thread safety: one instance per stream; not shareable between threads without a lock.
#pragma once

#include <cstdint>
#include <string>

#include "common/text/tokenizer.h"

namespace moe::text {

class StreamDetokenizer {
 public:
  StreamDetokenizer(const Tokenizer& tok, bool skip_special) : tok_(tok), skip_special_(skip_special) {}
  // Adds one token; returns the text that became complete (may be empty).
  std::string Push(int32_t id);
  // End of stream: returns the held-back bytes (an incomplete tail becomes U+FFFD).
  std::string Finish();
  size_t held_bytes() const { return pending_.size(); }

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace moe::text
