#include "services/gateway/http_request_reader.h"

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <algorithm>
#include <cctype>

#include "absl/strings/str_cat.h"
#include "services/gateway/content_decoding.h"

namespace moe::gateway {

namespace http = boost::beast::http;

struct HttpRequestReader::Parser {
  explicit Parser(const HttpLimits& l) {
    p.header_limit(static_cast<std::uint32_t>(std::min<size_t>(l.max_header_bytes, UINT32_MAX)));
    p.body_limit(static_cast<std::uint64_t>(l.max_body_bytes));
  }
  http::request_parser<http::string_body> p;
};

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

std::string_view View(boost::beast::string_view s) { return std::string_view(s.data(), s.size()); }

// A chunked body's chunk-size line and trailers are not covered by Beast's header limit;
// this much unparsed input with no progress means one of them is absurdly long.
constexpr size_t kMaxStall = 64 << 10;

}  // namespace

HttpRequestReader::HttpRequestReader(HttpLimits limits)
    : limits_(limits), parser_(std::make_unique<Parser>(limits_)) {}

HttpRequestReader::~HttpRequestReader() = default;

void HttpRequestReader::Reset() {
  parser_ = std::make_unique<Parser>(limits_);
  request_ = HttpRequest();
  expect_continue_ = false;
  coding_ = 0;
  state_ = State::kIdle;
}

HttpRequestReader::State HttpRequestReader::Fail(int status, std::string code, std::string message) {
  error_ = HttpFramingError{status, std::move(code), std::move(message)};
  state_ = State::kError;
  return state_;
}

HttpRequestReader::State HttpRequestReader::Feed(std::string_view bytes) {
  pending_.append(bytes);
  if (state_ == State::kDone || state_ == State::kError) return state_;
  if (state_ == State::kIdle) {
    // RFC 9112 2.2: a server SHOULD ignore empty lines received before a request-line.
    size_t skip = 0;
    while (skip < pending_.size() && (pending_[skip] == '\r' || pending_[skip] == '\n')) ++skip;
    pending_.erase(0, skip);
    if (pending_.empty()) return state_;
    state_ = State::kHead;
  }
  while (true) {
    boost::system::error_code ec;
    const size_t n = parser_->p.put(boost::asio::const_buffer(pending_.data(), pending_.size()), ec);
    pending_.erase(0, n);
    if (ec == http::error::need_more) {
      if (state_ == State::kBody && pending_.size() > kMaxStall) {
        return Fail(400, "malformed_request", "malformed HTTP request: a chunk-size line or trailer is too long");
      }
      return state_;
    }
    if (ec == http::error::header_limit) {
      return Fail(431, "header_too_large",
                  absl::StrCat("the request head is larger than ", limits_.max_header_bytes,
                               " bytes (--max-header-bytes)"));
    }
    if (ec == http::error::body_limit) {
      return Fail(413, "body_too_large",
                  absl::StrCat("request body is larger than the limit of ", limits_.max_body_bytes,
                               " bytes (--max-body)"));
    }
    if (ec) return Fail(400, "malformed_request", absl::StrCat("malformed HTTP request: ", ec.message()));
    if (state_ == State::kHead && parser_->p.is_header_done()) {
      if (CheckHead() == State::kError) return state_;
      state_ = State::kBody;
    }
    if (parser_->p.is_done()) return Finish();
    if (n == 0 || pending_.empty()) return state_;
  }
}

HttpRequestReader::State HttpRequestReader::FeedEof() {
  if (state_ == State::kHead || state_ == State::kBody) {
    return Fail(400, "incomplete_request", "the client closed the connection in the middle of a request");
  }
  return state_;
}

HttpRequestReader::State HttpRequestReader::CheckHead() {
  const auto& m = parser_->p.get();
  const unsigned version = m.version();
  if (version != 10 && version != 11) {
    return Fail(505, "http_version_not_supported",
                absl::StrCat("HTTP/", version / 10, ".", version % 10, " is not supported (HTTP/1.0 and 1.1 are)"));
  }
  int fields = 0, hosts = 0, encodings = 0;
  for (const auto& f : m) {
    ++fields;
    const std::string_view v = View(f.value());
    if (v.find_first_of("\r\n") != std::string_view::npos) {
      // RFC 9112 5.2: obs-fold (a field value continued on the next line) may be rejected.
      return Fail(400, "malformed_request", "malformed HTTP request: a header field is folded over two lines");
    }
    if (f.name() == http::field::host) ++hosts;
    if (f.name() == http::field::content_encoding) ++encodings;
  }
  if (fields > limits_.max_headers) {
    return Fail(431, "too_many_headers",
                absl::StrCat("the request has ", fields, " header fields; at most ", limits_.max_headers,
                             " are accepted (--max-headers)"));
  }
  if (version == 11 && hosts != 1) {
    return Fail(400, "missing_host", hosts == 0 ? "an HTTP/1.1 request needs a Host header"
                                                : "the request has more than one Host header");
  }
  const bool has_te = m.find(http::field::transfer_encoding) != m.end();
  if (has_te) {
    const std::string te = Lower(Trim(View(m[http::field::transfer_encoding])));
    if (version == 10) return Fail(400, "malformed_request", "Transfer-Encoding is not allowed in HTTP/1.0");
    if (te != "chunked") {
      return Fail(501, "unsupported_transfer_encoding",
                  absl::StrCat("Transfer-Encoding '", te.substr(0, 64), "' is not supported (only 'chunked')"));
    }
  }
  if (encodings > 1) {
    return Fail(415, "unsupported_content_encoding", "more than one Content-Encoding header");
  }
  if (encodings == 1) {
    auto coding = ParseContentCoding(View(m[http::field::content_encoding]));
    if (!coding.ok()) return Fail(415, "unsupported_content_encoding", std::string(coding.status().message()));
    coding_ = static_cast<int>(*coding);
  }
  if (m.find(http::field::expect) != m.end()) {
    if (Lower(Trim(View(m[http::field::expect]))) != "100-continue") {
      return Fail(417, "expectation_failed", "the only expectation supported is 'Expect: 100-continue'");
    }
    expect_continue_ = version == 11 && !parser_->p.is_done();
  }
  const auto method = m.method();
  const bool wants_body = method == http::verb::post || method == http::verb::put || method == http::verb::patch;
  if (wants_body && !has_te && m.find(http::field::content_length) == m.end()) {
    return Fail(411, "length_required",
                std::string(View(m.method_string())) + " needs a Content-Length or Transfer-Encoding: chunked");
  }
  return state_;
}

HttpRequestReader::State HttpRequestReader::Finish() {
  auto& m = parser_->p.get();
  request_.method = std::string(View(m.method_string()));
  request_.target = std::string(View(m.target()));
  const size_t q = request_.target.find('?');
  request_.path = request_.target.substr(0, q);
  request_.query = q == std::string::npos ? "" : request_.target.substr(q + 1);
  request_.version = static_cast<int>(m.version());
  request_.keep_alive = m.keep_alive();
  request_.headers.clear();
  for (const auto& f : m) request_.headers.emplace_back(Lower(View(f.name_string())), std::string(View(f.value())));
  auto body = DecodeContent(static_cast<ContentCoding>(coding_), m.body(), limits_.max_body_bytes);
  if (!body.ok()) {
    if (absl::IsResourceExhausted(body.status())) {
      return Fail(413, "body_too_large",
                  absl::StrCat("request body is larger than the limit of ", limits_.max_body_bytes,
                               " bytes (--max-body) once decoded"));
    }
    return Fail(400, "invalid_content_encoding", absl::StrCat("request body: ", body.status().message()));
  }
  request_.body = *std::move(body);
  m.body().clear();
  state_ = State::kDone;
  return state_;
}

HttpRequest HttpRequestReader::TakeRequest() {
  HttpRequest r = std::move(request_);
  Reset();
  return r;
}

}  // namespace moe::gateway
