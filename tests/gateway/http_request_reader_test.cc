// HTTP framing without sockets: the rules of http_request_reader.h, byte by byte.
#include "services/gateway/http_request_reader.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <string>

#include "services/gateway/content_decoding.h"

namespace moe::gateway {
namespace {

using State = HttpRequestReader::State;

HttpLimits Small() {
  HttpLimits l;
  l.max_header_bytes = 1024;
  l.max_headers = 8;
  l.max_body_bytes = 100;
  return l;
}

std::string Gzip(const std::string& data, int window_bits = 15 + 16) {
  z_stream z{};
  deflateInit2(&z, 9, Z_DEFLATED, window_bits, 9, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, data.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

struct Outcome {
  State state = State::kIdle;
  int status = 0;
  std::string code;
  HttpRequest request;
};

Outcome FeedAll(const std::string& bytes, HttpLimits l = Small(), size_t step = 0) {
  HttpRequestReader r(l);
  State st = State::kIdle;
  if (step == 0) {
    st = r.Feed(bytes);
  } else {
    for (size_t i = 0; i < bytes.size() && st != State::kDone && st != State::kError; i += step) {
      st = r.Feed(std::string_view(bytes).substr(i, step));
    }
  }
  Outcome o;
  o.state = st;
  if (st == State::kError) {
    o.status = r.error().status;
    o.code = r.error().code;
    EXPECT_FALSE(r.error().message.empty());
  }
  if (st == State::kDone) o.request = r.TakeRequest();
  return o;
}

TEST(HttpRequestReader, ParsesARequestWhateverTheCuts) {
  const std::string req =
      "POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: a\r\nX-Api-Key: k\r\nContent-Length: 5\r\n\r\nhello";
  for (size_t step : {0, 1, 2, 7}) {
    Outcome o = FeedAll(req, Small(), step);
    ASSERT_EQ(o.state, State::kDone) << step;
    EXPECT_EQ(o.request.method, "POST");
    EXPECT_EQ(o.request.path, "/v1/chat/completions");
    EXPECT_EQ(o.request.query, "x=1");
    EXPECT_EQ(o.request.body, "hello");
    EXPECT_EQ(o.request.HeaderOr("x-api-key"), "k");  // names lower-cased
    EXPECT_TRUE(o.request.keep_alive);
  }
}

TEST(HttpRequestReader, ChunkedBodiesAreDecodedAndBounded) {
  Outcome o = FeedAll("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n3;ext=1\r\n!!!\r\n0\r\n\r\n",
                      Small(), 3);
  ASSERT_EQ(o.state, State::kDone);
  EXPECT_EQ(o.request.body, "hello!!!");
  // 101 bytes in chunks of 10: over the 100-byte limit while it arrives.
  std::string big = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 11; ++i) big += "a\r\n0123456789\r\n";
  big += "0\r\n\r\n";
  o = FeedAll(big);
  EXPECT_EQ(o.status, 413);
  EXPECT_EQ(o.code, "body_too_large");
  // An absurd chunk size.
  o = FeedAll("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFFFFFF\r\n");
  EXPECT_EQ(o.state, State::kError);
  // A chunk-size line that never ends.
  o = FeedAll("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1;" + std::string(100000, 'x'));
  EXPECT_EQ(o.state, State::kError);
  EXPECT_EQ(o.status, 400);
}

TEST(HttpRequestReader, FramingThatCouldSmuggleIsRefused) {
  const std::vector<std::pair<std::string, int>> cases = {
      {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
      {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n", 501},
      {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
      {"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: a\r\n\r\n", 411},
      {"GET / HTTP/1.1\r\n\r\n", 400},                      // no Host
      {"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},  // two
      {"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400},  // the HTTP/2 preface
      {"GET / HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\n\r\n", 417},
      {"GET /\x01 HTTP/1.1\r\nHost: a\r\n\r\n", 400},
      {"GET / HTTP/1.1\nHost: a\n\n", 400},                  // bare LF
      {std::string("GET / HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n", 33), 400},
      {"GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n", 400},
      {std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11), 400},  // TLS ClientHello
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& [bytes, status] = cases[i];
    Outcome o = FeedAll(bytes);
    EXPECT_EQ(o.state, State::kError) << "case " << i;
    EXPECT_EQ(o.status, status) << "case " << i;
  }
  // Versions other than 1.0/1.1.
  for (const char* v : {"HTTP/2.0", "HTTP/0.9", "HTTP/1.2"}) {
    Outcome o = FeedAll(std::string("GET / ") + v + "\r\nHost: a\r\n\r\n");
    EXPECT_EQ(o.state, State::kError) << v;
    EXPECT_TRUE(o.status == 505 || o.status == 400) << v << " " << o.status;
  }
  // obs-fold: Beast unfolds it (RFC 9112 5.2 allows replacing it with spaces); no CR or LF
  // ever reaches a header value.
  Outcome fold = FeedAll("GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n  folded\r\n\r\n");
  if (fold.state == State::kDone) {
    EXPECT_EQ(fold.request.HeaderOr("x").find_first_of("\r\n"), std::string::npos);
  } else {
    EXPECT_EQ(fold.status, 400);
  }
}

TEST(HttpRequestReader, HeadLimits) {
  std::string many = "GET / HTTP/1.1\r\nHost: a\r\n";
  for (int i = 0; i < 8; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  Outcome o = FeedAll(many + "\r\n");
  EXPECT_EQ(o.status, 431);
  EXPECT_EQ(o.code, "too_many_headers");
  o = FeedAll("GET / HTTP/1.1\r\nHost: a\r\nX: " + std::string(2000, 'v') + "\r\n\r\n");
  EXPECT_EQ(o.status, 431);
  EXPECT_EQ(o.code, "header_too_large");
  o = FeedAll("GET /" + std::string(2000, 'p') + " HTTP/1.1\r\n");  // no end of head needed to know
  EXPECT_EQ(o.status, 431);
  // A header that never ends is refused by the limit while it arrives, a byte at a time.
  o = FeedAll("GET / HTTP/1.1\r\nHost: a\r\nX: " + std::string(5000, 'v'), Small(), 1);
  EXPECT_EQ(o.status, 431);
}

TEST(HttpRequestReader, ContentEncodingIsDecodedWithTheLimitOnTheOutput) {
  auto post = [](const std::string& coding, const std::string& body) {
    return "POST / HTTP/1.1\r\nHost: a\r\nContent-Encoding: " + coding + "\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  };
  Outcome o = FeedAll(post("gzip", Gzip("{\"a\":1}")));
  ASSERT_EQ(o.state, State::kDone);
  EXPECT_EQ(o.request.body, "{\"a\":1}");
  o = FeedAll(post("deflate", Gzip("zlib", 15)));
  EXPECT_EQ(o.request.body, "zlib");
  o = FeedAll(post("deflate", Gzip("raw", -15)));
  EXPECT_EQ(o.request.body, "raw");
  // 1 KB of gzip that inflates to 1 MiB: within the limit on the wire, refused while inflating.
  const std::string bomb = Gzip(std::string(1 << 20, 'a'));
  HttpLimits l = Small();
  l.max_body_bytes = 4096;
  ASSERT_LT(bomb.size(), l.max_body_bytes);
  o = FeedAll(post("gzip", bomb), l);
  EXPECT_EQ(o.status, 413);
  EXPECT_EQ(o.code, "body_too_large");
  o = FeedAll(post("gzip", "not gzip at all"));
  EXPECT_EQ(o.status, 400);
  EXPECT_EQ(o.code, "invalid_content_encoding");
  o = FeedAll(post("gzip", Gzip("truncated body here").substr(0, 12)));
  EXPECT_EQ(o.code, "invalid_content_encoding");
  for (const char* refused : {"br", "zstd", "compress", "gzip, gzip", "gzip;q=1"}) {
    o = FeedAll(post(refused, "x"));
    EXPECT_EQ(o.status, 415) << refused;
    EXPECT_EQ(o.code, "unsupported_content_encoding") << refused;
  }
  o = FeedAll(post("identity", "plain"));
  EXPECT_EQ(o.request.body, "plain");
}

TEST(HttpRequestReader, PipelinedRequestsComeOutInOrderAndErrorsStop) {
  HttpRequestReader r(Small());
  const std::string two = "GET /a HTTP/1.1\r\nHost: a\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\n";
  ASSERT_EQ(r.Feed(two), State::kDone);
  EXPECT_EQ(r.TakeRequest().path, "/a");
  ASSERT_EQ(r.Feed(""), State::kDone);
  EXPECT_EQ(r.TakeRequest().path, "/b");
  EXPECT_EQ(r.Feed(""), State::kIdle);
  // After an error nothing more is parsed, whatever follows.
  HttpRequestReader e(Small());
  EXPECT_EQ(e.Feed("GET /\x01 HTTP/1.1\r\nHost: a\r\n\r\nGET /health HTTP/1.1\r\nHost: a\r\n\r\n"), State::kError);
  EXPECT_EQ(e.Feed("GET /health HTTP/1.1\r\nHost: a\r\n\r\n"), State::kError);
  // Empty lines before a request are skipped (RFC 9112 2.2).
  HttpRequestReader blank(Small());
  EXPECT_EQ(blank.Feed("\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"), State::kDone);
  // A request cut by the client's close.
  HttpRequestReader cut(Small());
  EXPECT_EQ(cut.Feed("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc"), State::kBody);
  EXPECT_EQ(cut.FeedEof(), State::kError);
  EXPECT_EQ(cut.error().code, "incomplete_request");
}

TEST(HttpRequestReader, ExpectContinueAndHttp10) {
  HttpRequestReader r(Small());
  EXPECT_EQ(r.Feed("POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"), State::kBody);
  EXPECT_TRUE(r.expects_continue());
  r.clear_continue();
  EXPECT_EQ(r.Feed("ok"), State::kDone);
  Outcome o = FeedAll("GET / HTTP/1.0\r\n\r\n");
  ASSERT_EQ(o.state, State::kDone);
  EXPECT_EQ(o.request.version, 10);
  EXPECT_FALSE(o.request.keep_alive);
  o = FeedAll("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
  EXPECT_FALSE(o.request.keep_alive);
}

TEST(ContentDecoding, NamesWhatItRefuses) {
  auto c = ParseContentCoding("br");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("'br'"), absl::string_view::npos);
  EXPECT_EQ(*ParseContentCoding(" GZIP "), ContentCoding::kGzip);
  EXPECT_EQ(*ParseContentCoding("x-gzip"), ContentCoding::kGzip);
  auto big = DecodeContent(ContentCoding::kGzip, Gzip(std::string(10000, 'z')), 9999);
  EXPECT_TRUE(absl::IsResourceExhausted(big.status()));
  auto exact = DecodeContent(ContentCoding::kGzip, Gzip(std::string(10000, 'z')), 10000);
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(exact->size(), 10000u);
  auto trailing = DecodeContent(ContentCoding::kGzip, Gzip("a") + "junk", 100);
  EXPECT_FALSE(trailing.ok());
}

}  // namespace
}  // namespace moe::gateway
