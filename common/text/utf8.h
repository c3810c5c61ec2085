// UTF-8 helpers and the GPT-2 byte-level alphabet used by byte-level BPE.
//
// Contract (matches Rust's String::from_utf8_lossy, Python's bytes.decode('utf-8','replace')
// and hence Hugging Face `tokenizers`): an ill-formed sequence is replaced by one U+FFFD per
// "maximal subpart" (Unicode ch. 3, U+FFFD substitution of maximal subparts). The encoder
// sanitizes its input this way before anything else, so invalid bytes in a prompt encode
// exactly as HF encodes the lossily decoded string; decode() applies the same rule to the
// bytes the tokens spell.
// Thread safety: all functions are pure; the tables are immutable after first use.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace moe::text {

// Decodes the code point at s[i]. Returns the bytes consumed (>= 1). On an ill-formed
// sequence *cp = -1 and the return value is the length of its maximal subpart.
int DecodeUtf8(std::string_view s, size_t i, int32_t* cp);

bool IsValidUtf8(std::string_view s);

// Replaces every maximal ill-formed subpart with U+FFFD (EF BF BD).
std::string SanitizeUtf8(std::string_view s);

void AppendUtf8(std::string* out, uint32_t cp);

// Length of the trailing bytes of `s` that form a well-formed but incomplete sequence
// (a prefix of some valid character): 0..3. Streaming holds these back.
size_t IncompleteUtf8Tail(std::string_view s);

// GPT-2's bytes_to_unicode(): byte b -> the UTF-8 of its printable stand-in character.
const std::array<std::string, 256>& ByteToUnicode();
// Inverse: code point -> byte, or -1 if the code point is not in the alphabet.
int UnicodeToByte(int32_t cp);

// Python's str.isspace() for one code point, and str.strip() with no argument.
bool PyIsSpace(int32_t cp);
std::string PyStrip(std::string_view s);

}  // namespace moe::text
