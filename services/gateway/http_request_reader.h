// HTTP/1.x request framing without I/O: bytes in, complete requests or a framing error out
// (Boost.Beast's parser does the RFC 9112 grammar; this class adds the gateway's rules).
// The connection (http_transport.h) feeds it what it reads; the fuzzer feeds it anything.
//
// Rules (each limit is a flag, docs/SERVING.md "Limits"):
//  - the head (request line + fields) is at most max_header_bytes (431 header_too_large)
//    and has at most max_headers fields (431 too_many_headers);
//  - HTTP/1.0 and 1.1 only (505); HTTP/1.1 needs exactly one Host (400 missing_host);
//  - a body is framed by Content-Length or by Transfer-Encoding: chunked alone; both, or any
//    other transfer coding, is refused (400 / 501); a POST/PUT/PATCH with neither is 411;
//  - the body, after Content-Encoding decoding, is at most max_body_bytes (413
//    body_too_large), checked on the wire length (Content-Length at once, chunked as it
//    arrives) and again while inflating (content_decoding.h); codings we do not decode 415;
//  - Expect: 100-continue is reported (expects_continue) so the connection can answer it;
//    any other expectation is 417.
// After any error the connection must be closed: the reader cannot tell where the next
// request would start (reading on is how requests get smuggled). Bytes past the end of a
// complete request stay buffered for the next one (pipelining, served in order).
// Thread safety: one reader per connection.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "services/gateway/http_request.h"

namespace moe::gateway {

struct HttpLimits {
  size_t max_header_bytes = 32 << 10;  // --max-header-bytes
  int max_headers = 100;               // --max-headers
  size_t max_body_bytes = 8 << 20;     // --max-body
};

struct HttpFramingError {
  int status = 400;
  std::string code;     // error.code of the JSON reply
  std::string message;  // names the cause and the flag that sets the limit
};

class HttpRequestReader {
 public:
  enum class State {
    kIdle,   // no byte of a request yet
    kHead,   // inside the head
    kBody,   // head accepted, body pending
    kDone,   // a complete request: TakeRequest()
    kError,  // framing error: error(), then close the connection
  };

  explicit HttpRequestReader(HttpLimits limits);
  ~HttpRequestReader();
  HttpRequestReader(const HttpRequestReader&) = delete;
  HttpRequestReader& operator=(const HttpRequestReader&) = delete;

  // Appends `bytes` and parses as far as they go; Feed("") parses what is buffered.
  State Feed(std::string_view bytes);
  // The client closed its side: a request cut short is a framing error.
  State FeedEof();
  State state() const { return state_; }
  // kBody and the client sent "Expect: 100-continue" (answer it once, then clear_continue()).
  bool expects_continue() const { return expect_continue_; }
  void clear_continue() { expect_continue_ = false; }
  // kDone -> the request; the reader is ready for the next one (call Feed("") to parse
  // bytes already buffered).
  HttpRequest TakeRequest();
  const HttpFramingError& error() const { return error_; }
  size_t buffered() const { return pending_.size(); }

 private:
  struct Parser;
  State Fail(int status, std::string code, std::string message);
  State CheckHead();
  State Finish();
  void Reset();

  const HttpLimits limits_;
  std::unique_ptr<Parser> parser_;
  std::string pending_;
  State state_ = State::kIdle;
  bool expect_continue_ = false;
  HttpRequest request_;
  HttpFramingError error_;
  int coding_ = 0;  // ContentCoding of the body
};

}  // namespace moe::gateway
