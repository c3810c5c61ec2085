// The text each token id puts into the output, as the gateway's detokenizer hands it to the
// output parser -- and so as structured outputs see it (common/structured: the grammar is
// matched against exactly these bytes, on the worker).
//
// Rule: a token's decoded bytes (Tokenizer::AppendTokenBytes); special tokens give "" --
// except the chat format's markers (OutputMarkers: <think>, </think>, <tool_call>, ...),
// which the output parser reads as text and removes itself, so they are kept even when the
// tokenizer marks them special (glm_tiny does; skip_special_tokens=false shows the rest).
// Thread safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "common/text/chat_parser.h"
#include "common/text/tokenizer.h"

namespace moe::text {

// The control tags the output parser of `family` reads (reasoning and tool-call tags).
std::vector<std::string> OutputMarkers(ChatFamily family);

// texts[id] for id in [0, tokenizer.vocab_size()).
std::vector<std::string> OutputTokenTexts(const Tokenizer& tokenizer, const std::vector<std::string>& markers);

// The byte-level test vocabulary (the gateway's ByteCodec, the toy worker): ids 0..255 are
// the bytes, 256 is the end of text ("").
std::vector<std::string> ByteLevelTexts();
inline constexpr int32_t kByteLevelEos = 256;

}  // namespace moe::text
