// Request-body Content-Encoding: which codings the gateway decodes, and decoding them
// with the decoded size bounded (a 65 KB gzip body can inflate to 64 MiB: the limit is on
// what comes out, checked while inflating, not on what came in).
//
// Supported: identity (or no header), gzip / x-gzip, deflate (zlib-wrapped, and the raw
// deflate some clients send). One coding only; a list ("gzip, gzip") or any other coding
// (br, zstd, compress) is refused by name: the caller answers 415.
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace moe::gateway {

enum class ContentCoding { kIdentity, kGzip, kDeflate };

// Parses a Content-Encoding header value (case-insensitive, surrounding spaces ignored).
// Unimplemented (names the coding) for one we do not decode.
absl::StatusOr<ContentCoding> ParseContentCoding(std::string_view header);

// Decodes `body`. ResourceExhausted when the decoded body would exceed `max_bytes`
// (decoding stops there); InvalidArgument for corrupt or truncated data, or bytes after
// the end of the stream.
absl::StatusOr<std::string> DecodeContent(ContentCoding coding, std::string_view body, size_t max_bytes);

}  // namespace moe::gateway
