// Token ids of a rendered chat prompt in which client text can never become a control token:
// the same ids as transformers 5.24's
// apply_chat_template(..., tokenize=True, sanitize_control_tokens=True).
//
// Control tokens (ChatControlTokens): the tokenizer's special added tokens, plus its other
// added tokens that occur in the template's literal text (not whitespace-only ones) --
// transformers' _get_control_tokens. EncodeRenderedChat finds control tokens in the rendered
// text (leftmost, longest first); one that overlaps a client span (RenderedChat) is encoded
// as plain text on its own, the text between such tokens is encoded normally (added tokens
// matched, no post-processor). So a user typing "<|assistant|>" gets the ids of those
// characters, while the template's own <|assistant|> stays the control token.
// (transformers marks control tokens inside each client string before rendering; here the
// renderer knows which rendered bytes came from the client, so a token built from client
// text and template text -- impossible to mark there -- is text too.)
// Thread safety: pure functions over an immutable tokenizer.
#pragma once

#include <string>
#include <vector>

#include "common/text/chat_template.h"
#include "common/text/tokenizer.h"

namespace moe::text {

std::vector<std::string> ChatControlTokens(const Tokenizer& tok, const std::vector<std::string>& template_literals);

std::vector<int32_t> EncodeRenderedChat(const Tokenizer& tok, const RenderedChat& chat,
                                        const std::vector<std::string>& control_tokens);

}  // namespace moe::text
