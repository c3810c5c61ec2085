// A full-size stand-in borrows a small model's tokenizer (moe synth --tokenizer): the
// text side (byte-level BPE, chat template) is real, but the donor numbers its special
// tokens after its own small vocabulary (glm-tiny: <|endoftext|> = 12256) while the
// release config's stop ids are the release's (GLM-5: 154820, 154827, 154829). Served
// as it is, every stop id is outside the tokenizer and the workers refuse to start.
//
// FitTokenizerIds moves the donor's added tokens above its BPE vocabulary by one offset
// so that its eos token lands on the config's first stop id; the ids between are holes
// (no text). It succeeds only when every config stop id then names an added token and
// every moved id stays below vocab_size.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "absl/status/statusor.h"

namespace moe {

// tokenizer_json: tokenizer.json text (rewritten in place when ids move).
// tokenizer_config_json: tokenizer_config.json text or nullptr; its eos_token names the
// donor's eos, and its added_tokens_decoder keys move with the ids.
// Returns the offset applied (0: the ids already fit, nothing rewritten). InvalidArgument
// naming the cause when the donor cannot be fitted.
absl::StatusOr<int64_t> FitTokenizerIds(std::string* tokenizer_json, std::string* tokenizer_config_json,
                                        int64_t vocab_size, std::span<const int64_t> stop_ids);

}  // namespace moe
