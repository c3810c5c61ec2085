// The tokenizer on arbitrary input: encode of any bytes (with client spans cut from the
// input, as chat prompts have), decode of any ids, and the streaming detokenizer; on the
// GLM tokenizer (byte-level BPE, no normalizer) and DeepSeek-V3's (with a normalizer).
// Checks (the contracts in tokenizer.h / detokenizer.h):
//  - GLM: Decode(Encode(text)) is the text (after UTF-8 repair): nothing lost, nothing added;
//  - no added token id inside a plain span; every id inside the vocabulary;
//  - the streaming detokenizer's pieces concatenate to Decode of the same ids.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/text/detokenizer.h"
#include "common/text/tokenizer.h"
#include "common/text/utf8.h"

namespace {

using moe::text::TextSpan;
using moe::text::Tokenizer;

const Tokenizer* Load(const char* rel) {
  auto t = Tokenizer::FromFile(std::string(MOE_SOURCE_DIR) + "/tests/data/text/" + rel);
  if (!t.ok()) std::abort();
  return t->release();
}

const Tokenizer* Glm() {
  static const Tokenizer* t = Load("glm_tiny/tokenizer.json");
  return t;
}
const Tokenizer* DeepSeek() {
  static const Tokenizer* t = Load("real/deepseek_v3.json.gz");
  return t;
}

void CheckStream(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special) {
  moe::text::StreamDetokenizer d(tok, skip_special);
  std::string streamed;
  for (int32_t id : ids) streamed += d.Push(id);
  streamed += d.Finish();
  if (streamed != tok.Decode(ids, skip_special)) std::abort();
}

}  // namespace

// Loading the tokenizers (DeepSeek's 128k vocabulary under ASan: seconds) is not an input's time.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  Glm();
  DeepSeek();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t mode = data[0];
  const Tokenizer& tok = (mode & 1) ? *DeepSeek() : *Glm();
  const std::string_view in(reinterpret_cast<const char*>(data + 1), size - 1);
  if ((mode & 2) == 0) {
    // Encode: spans from the high bits of the mode byte, cut at every 0x1F of the input.
    std::vector<TextSpan> spans;
    if (mode & 4) {
      size_t begin = 0;
      bool plain = (mode & 8) != 0;
      for (size_t i = 0; i <= in.size(); ++i) {
        if (i == in.size() || in[i] == 0x1F) {
          if (plain && i > begin) spans.push_back({begin, i});
          plain = !plain;
          begin = i;
        }
      }
    }
    const auto ids = tok.Encode(in, {.parse_special = (mode & 16) == 0,
                                     .add_special_tokens = (mode & 32) != 0,
                                     .plain_spans = spans});
    for (int32_t id : ids) {
      if (id < 0 || static_cast<size_t>(id) >= tok.vocab_size()) std::abort();
    }
    if (&tok == Glm() && (mode & 32) == 0) {
      const std::string want = moe::text::IsValidUtf8(in) ? std::string(in) : moe::text::SanitizeUtf8(in);
      if (tok.Decode(ids) != want) std::abort();
    }
    // All of the input one plain span: no added token at all, whatever the text holds.
    if (spans.size() == 1 && spans[0].begin == 0 && spans[0].end == in.size() && (mode & 32) == 0) {
      for (int32_t id : ids) {
        for (const auto& a : tok.added_tokens()) {
          if (a.id == id) std::abort();
        }
      }
    }
    CheckStream(tok, ids, (mode & 64) != 0);
    return 0;
  }
  // Decode: the input as little-endian int32 ids (any value, unknown ones included).
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 4 <= in.size(); i += 4) {
    uint32_t v = static_cast<uint8_t>(in[i]) | static_cast<uint32_t>(static_cast<uint8_t>(in[i + 1])) << 8 |
                 static_cast<uint32_t>(static_cast<uint8_t>(in[i + 2])) << 16 |
                 static_cast<uint32_t>(static_cast<uint8_t>(in[i + 3])) << 24;
    // Mostly ids near the vocabulary, sometimes anything.
    ids.push_back((mode & 4) ? static_cast<int32_t>(v) : static_cast<int32_t>(v % (tok.vocab_size() + 16)));
  }
  const std::string text = tok.Decode(ids, (mode & 64) != 0);
  if (!moe::text::IsValidUtf8(text)) std::abort();
  CheckStream(tok, ids, (mode & 64) != 0);
  return 0;
}
