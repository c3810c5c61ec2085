#include "services/gateway/content_decoding.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>

#include "absl/strings/str_cat.h"

namespace moe::gateway {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// One inflate pass with zlib's window_bits (31: gzip, 15: zlib, -15: raw deflate).
absl::StatusOr<std::string> Inflate(std::string_view in, int window_bits, size_t max_bytes) {
  z_stream z{};
  if (inflateInit2(&z, window_bits) != Z_OK) return absl::InternalError("zlib inflateInit2 failed");
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());  // bodies are far below 4 GiB (--max-body)
  std::string out;
  char buf[1 << 15];
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof(buf);
    rc = inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&z);
      if (rc == Z_BUF_ERROR) return absl::InvalidArgumentError("compressed body is truncated");
      return absl::InvalidArgumentError(absl::StrCat("compressed body is corrupt (zlib: ", z.msg ? z.msg : "error", ")"));
    }
    const size_t got = sizeof(buf) - z.avail_out;
    if (out.size() + got > max_bytes) {
      inflateEnd(&z);
      return absl::ResourceExhaustedError(absl::StrCat("decoded body is larger than ", max_bytes, " bytes"));
    }
    out.append(buf, got);
    if (rc == Z_OK && got == 0 && z.avail_in == 0) {
      inflateEnd(&z);
      return absl::InvalidArgumentError("compressed body is truncated");
    }
  }
  const size_t rest = z.avail_in;
  inflateEnd(&z);
  if (rest != 0) return absl::InvalidArgumentError(absl::StrCat(rest, " bytes after the end of the compressed body"));
  return out;
}

}  // namespace

absl::StatusOr<ContentCoding> ParseContentCoding(std::string_view header) {
  const std::string v = Lower(Trim(header));
  if (v.empty() || v == "identity") return ContentCoding::kIdentity;
  if (v == "gzip" || v == "x-gzip") return ContentCoding::kGzip;
  if (v == "deflate") return ContentCoding::kDeflate;
  if (v.find(',') != std::string::npos) {
    return absl::UnimplementedError(absl::StrCat("Content-Encoding '", v.substr(0, 64),
                                                 "': only one coding is decoded (gzip, deflate or identity)"));
  }
  return absl::UnimplementedError(
      absl::StrCat("Content-Encoding '", v.substr(0, 64), "' is not supported (gzip, deflate or identity)"));
}

absl::StatusOr<std::string> DecodeContent(ContentCoding coding, std::string_view body, size_t max_bytes) {
  switch (coding) {
    case ContentCoding::kIdentity:
      if (body.size() > max_bytes) {
        return absl::ResourceExhaustedError(absl::StrCat("body is larger than ", max_bytes, " bytes"));
      }
      return std::string(body);
    case ContentCoding::kGzip:
      return Inflate(body, 15 + 16, max_bytes);
    case ContentCoding::kDeflate: {
      // RFC 9110 deflate is zlib-wrapped; some clients send raw deflate. A zlib stream
      // starts with a header whose first 16 bits are a multiple of 31.
      const bool zlib_wrapped = body.size() >= 2 && (static_cast<unsigned char>(body[0]) & 0x0F) == 8 &&
                                ((static_cast<unsigned char>(body[0]) << 8) | static_cast<unsigned char>(body[1])) %
                                        31 ==
                                    0;
      return Inflate(body, zlib_wrapped ? 15 : -15, max_bytes);
    }
  }
  return absl::InternalError("unknown content coding");
}

}  // namespace moe::gateway
