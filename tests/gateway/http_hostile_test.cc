// A hostile client against the gateway's HTTP layer (issue 20's findings and more of the
// same kinds): every framing attack gets exactly one JSON error and a closed connection (no
// request hidden inside it is ever served: no desync), limits hold for every body framing,
// slow clients cost no thread, connection caps answer instead of hanging, and a few hundred
// random mutations of a valid request never crash, hang or get a non-JSON error.
#include <gtest/gtest.h>
#include <poll.h>
#include <zlib.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/gateway/http_fixture.h"

namespace moe::gateway {
namespace {

using json = nlohmann::json;
using testing::Exchange;
using testing::HttpResult;
using testing::TestGateway;
using Clock = std::chrono::steady_clock;

const std::string kChat = R"({"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":0})";
// What an attack tries to get served behind the server's back.
const std::string kSmuggled = "GET /v1/models HTTP/1.1\r\nHost: a\r\n\r\n";

void Tight(HttpTransportConfig* c) {
  c->limits.max_body_bytes = 64 << 10;
  c->limits.max_header_bytes = 4096;
  c->limits.max_headers = 20;
  c->header_timeout_s = 1;
  c->read_timeout_s = 2;
  c->idle_timeout_s = 1;
  c->write_timeout_s = 2;
}

std::string Gzip(const std::string& data) {
  z_stream z{};
  deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY);
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

bool IsJsonError(const HttpResult& r) {
  json j = json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.contains("error") || !j["error"].is_object()) return false;
  for (const char* k : {"message", "type", "param", "code"}) {
    if (!j["error"].contains(k)) return false;
  }
  return j["error"]["message"].is_string() && !j["error"]["message"].get<std::string>().empty();
}

std::string Post(const std::string& path, const std::string& extra_headers, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n" + extra_headers + "\r\n" + body;
}

TEST(GatewayHostile, EveryFramingAttackGetsOneJsonErrorAndAClose) {
  TestGateway s("x", 1, {}, {}, 64 << 10, Tight);
  std::string many_headers = "GET /health HTTP/1.1\r\nHost: a\r\n";
  for (int i = 0; i < 30; ++i) many_headers += "X-H" + std::to_string(i) + ": v\r\n";
  std::string big_chunked = Post("/v1/chat/completions", "Transfer-Encoding: chunked\r\n", "");
  for (int i = 0; i < 70; ++i) big_chunked += "400\r\n" + std::string(1024, ' ') + "\r\n";
  big_chunked += "0\r\n\r\n";
  const std::string bomb = Gzip(std::string(64 << 20, ' '));  // 65 KB that inflates to 64 MiB
  const std::string small_bomb = Gzip(std::string(1 << 20, ' '));
  struct Attack {
    const char* name;
    std::string bytes;
    int status;
  };
  const std::vector<Attack> attacks = {
      {"control byte in the target", "GET /\x01 HTTP/1.1\r\nHost: a\r\n\r\n" + kSmuggled, 400},
      {"raw invalid bytes as the request line", "\xff\xfe\r\nHost: a\r\n\r\n" + kSmuggled, 400},
      {"request line with a fourth part", "GET / HTTP/1.1 junk\r\nHost: a\r\n\r\n" + kSmuggled, 400},
      {"header lines after a bad request line", "GARBAGE\r\n" + kSmuggled, 400},
      {"Content-Length and chunked",
       Post("/v1/completions", "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n" + kSmuggled), 400},
      {"chunked and Content-Length",
       Post("/v1/completions", "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", "0\r\n\r\n" + kSmuggled), 400},
      {"two different Content-Lengths",
       Post("/v1/completions", "Content-Length: 2\r\nContent-Length: 40\r\n", "{}" + kSmuggled), 400},
      {"Content-Length list", Post("/v1/completions", "Content-Length: 2, 40\r\n", "{}" + kSmuggled), 400},
      {"negative Content-Length", Post("/v1/completions", "Content-Length: -5\r\n", kSmuggled), 400},
      {"Content-Length overflow",
       Post("/v1/completions", "Content-Length: 18446744073709551617\r\n", kSmuggled), 400},
      {"gzip, chunked transfer coding",
       Post("/v1/completions", "Transfer-Encoding: gzip, chunked\r\n", "0\r\n\r\n" + kSmuggled), 501},
      {"unknown transfer coding", Post("/v1/completions", "Transfer-Encoding: xchunked\r\n", kSmuggled), 501},
      {"chunked twice",
       Post("/v1/completions", "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n" + kSmuggled),
       400},
      {"body without a length", Post("/v1/chat/completions", "", kChat + kSmuggled), 411},
      {"bad chunk size", Post("/v1/completions", "Transfer-Encoding: chunked\r\n", "zz\r\nab\r\n0\r\n\r\n" + kSmuggled),
       400},
      {"chunk size overflow",
       Post("/v1/completions", "Transfer-Encoding: chunked\r\n", "FFFFFFFFFFFFFFFFFFFFFF\r\n" + kSmuggled), 400},
      {"chunk without its CRLF",
       Post("/v1/completions", "Transfer-Encoding: chunked\r\n", "2\r\n{}XX0\r\n\r\n" + kSmuggled), 400},
      {"chunked body over --max-body", big_chunked + kSmuggled, 413},
      {"Content-Length over --max-body",
       Post("/v1/chat/completions", "Content-Length: 70000\r\n", std::string(70000, ' ')) + kSmuggled, 413},
      {"gzip bomb (65 KB -> 64 MiB)",
       Post("/v1/chat/completions",
            "Content-Encoding: gzip\r\nContent-Length: " + std::to_string(bomb.size()) + "\r\n", bomb) + kSmuggled,
       413},
      {"gzip bomb within the wire limit",
       Post("/v1/chat/completions",
            "Content-Encoding: gzip\r\nContent-Length: " + std::to_string(small_bomb.size()) + "\r\n", small_bomb) +
           kSmuggled,
       413},
      {"corrupt gzip", Post("/v1/chat/completions", "Content-Encoding: gzip\r\nContent-Length: 4\r\n", "abcd") + kSmuggled,
       400},
      {"brotli body", Post("/v1/chat/completions", "Content-Encoding: br\r\nContent-Length: 2\r\n", "{}") + kSmuggled,
       415},
      {"too many header fields", many_headers + "\r\n" + kSmuggled, 431},
      {"header field too large", "GET /health HTTP/1.1\r\nHost: a\r\nX: " + std::string(5000, 'v') + "\r\n\r\n" + kSmuggled,
       431},
      {"request line too large", "GET /" + std::string(5000, 'p') + " HTTP/1.1\r\nHost: a\r\n\r\n" + kSmuggled, 431},
      {"unsupported expectation", "GET /health HTTP/1.1\r\nHost: a\r\nExpect: 42-x\r\n\r\n" + kSmuggled, 417},
      {"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + kSmuggled, 400},
      {"HTTP/1.1 without Host", "GET /health HTTP/1.1\r\n\r\n" + kSmuggled, 400},
      {"two Hosts", "GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n" + kSmuggled, 400},
      {"NUL in a header value", std::string("GET /health HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n", 40) + kSmuggled, 400},
      {"bare LF line ends", "GET /health HTTP/1.1\nHost: a\n\n" + kSmuggled, 400},
      {"space before the colon", "GET /health HTTP/1.1\r\nHost : a\r\n\r\n" + kSmuggled, 400},
      {"TLS ClientHello on a plain port", std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11) + kSmuggled,
       400},
  };
  for (const Attack& a : attacks) {
    Exchange ex = testing::RawExchange(s.port, a.bytes, /*want=*/2, /*timeout_ms=*/4000);
    ASSERT_EQ(ex.responses.size(), 1u) << a.name << ": the smuggled request was served, or nothing came back";
    EXPECT_EQ(ex.responses[0].status, a.status) << a.name << ": " << ex.responses[0].body;
    EXPECT_TRUE(IsJsonError(ex.responses[0])) << a.name << ": " << ex.responses[0].body;
    EXPECT_EQ(ex.responses[0].Header("connection"), "close") << a.name;
    EXPECT_TRUE(ex.closed) << a.name << ": the connection stayed open after a framing error";
  }
  EXPECT_EQ(s.Get("/health").status, 200);
  EXPECT_EQ(s.fake->started.load(), 0) << "no attack reached a worker";
}

TEST(GatewayHostile, ValidFramingsAllWork) {
  TestGateway s("ok", 1, {}, {}, 64 << 10, Tight);
  // Pipelined: answered in order on one connection.
  Exchange ex = testing::RawExchange(s.port, "GET /health HTTP/1.1\r\nHost: a\r\n\r\n" + kSmuggled, 2);
  ASSERT_EQ(ex.responses.size(), 2u);
  EXPECT_EQ(ex.responses[0].status, 200);
  EXPECT_NE(ex.responses[1].body.find("\"data\""), std::string::npos);
  EXPECT_FALSE(ex.closed);
  // Chunked, gzip'd, and both.
  std::string chunked = Post("/v1/chat/completions", "Transfer-Encoding: chunked\r\n", "");
  for (size_t i = 0; i < kChat.size(); i += 7) {
    std::string part = kChat.substr(i, 7);
    chunked += absl::StrCat(absl::Hex(part.size()), "\r\n", part, "\r\n");
  }
  chunked += "0\r\n\r\n";
  ex = testing::RawExchange(s.port, chunked);
  ASSERT_EQ(ex.responses.size(), 1u);
  EXPECT_EQ(ex.responses[0].status, 200) << ex.responses[0].body;
  const std::string gz = Gzip(kChat);
  ex = testing::RawExchange(
      s.port, Post("/v1/chat/completions", "Content-Encoding: gzip\r\nContent-Length: " + std::to_string(gz.size()) + "\r\n",
                   gz));
  ASSERT_EQ(ex.responses.size(), 1u);
  EXPECT_EQ(ex.responses[0].status, 200) << ex.responses[0].body;
  // Expect: 100-continue gets its interim answer, then the response.
  int fd = testing::ConnectLoopback(s.port);
  testing::SendAll(fd, Post("/v1/chat/completions",
                            "Expect: 100-continue\r\nContent-Length: " + std::to_string(kChat.size()) + "\r\n", ""));
  ex = testing::ReadResponses(fd, 1, 2000);
  ASSERT_EQ(ex.responses.size(), 1u);
  EXPECT_EQ(ex.responses[0].status, 100);
  testing::SendAll(fd, kChat);
  ex = testing::ReadResponses(fd, 1, 5000);
  ::close(fd);
  ASSERT_EQ(ex.responses.size(), 1u);
  EXPECT_EQ(ex.responses[0].status, 200);
  // HTTP/1.0 without Host; HEAD has no body.
  ex = testing::RawExchange(s.port, "GET /health HTTP/1.0\r\n\r\n");
  ASSERT_EQ(ex.responses.size(), 1u);
  EXPECT_EQ(ex.responses[0].status, 200);
  EXPECT_TRUE(ex.closed);
  // HEAD: the head of a GET, no body; the next pipelined response starts right after it.
  fd = testing::ConnectLoopback(s.port);
  testing::SendAll(fd, "HEAD /health HTTP/1.1\r\nHost: a\r\n\r\n" + kSmuggled);
  std::string raw;
  char buf[4096];
  for (int i = 0; i < 50 && raw.find("\"data\"") == std::string::npos; ++i) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  const size_t second = raw.find("HTTP/1.1 200", 1);
  ASSERT_NE(second, std::string::npos) << raw;
  const std::string head = raw.substr(0, second);
  EXPECT_EQ(head.substr(0, 12), "HTTP/1.1 200");
  EXPECT_NE(head.find("Content-Length: "), std::string::npos);
  EXPECT_EQ(head.size(), head.find("\r\n\r\n") + 4) << "HEAD answered with a body";
}

TEST(GatewayHostile, DeadlinesAnswer408AndClose) {
  TestGateway s("x", 1, {}, {}, 64 << 10, Tight);
  // A head that never ends: 408 after --header-timeout-s (1 s), JSON, closed.
  auto t0 = Clock::now();
  int fd = testing::ConnectLoopback(s.port);
  testing::SendAll(fd, "GET /health HTTP/1.1\r\nHost: a\r\nX-Slow: ");
  Exchange ex = testing::ReadResponses(fd, 1, 5000);
  ::close(fd);
  double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_EQ(ex.responses.size(), 1u);
  EXPECT_EQ(ex.responses[0].status, 408);
  EXPECT_TRUE(IsJsonError(ex.responses[0]));
  EXPECT_NE(ex.responses[0].body.find("--header-timeout-s"), std::string::npos);
  EXPECT_GE(waited, 0.9);
  EXPECT_LT(waited, 3.0);
  // A body that stops coming: 408 after --read-timeout-s (2 s).
  t0 = Clock::now();
  fd = testing::ConnectLoopback(s.port);
  testing::SendAll(fd, Post("/v1/chat/completions", "Content-Length: 100\r\n", "{\"model\":"));
  ex = testing::ReadResponses(fd, 1, 6000);
  ::close(fd);
  waited = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_EQ(ex.responses.size(), 1u);
  EXPECT_EQ(ex.responses[0].status, 408);
  EXPECT_NE(ex.responses[0].body.find("--read-timeout-s"), std::string::npos);
  EXPECT_GE(waited, 1.9);
  EXPECT_LT(waited, 4.0);
  // A byte a second keeps no connection alive past the head deadline.
  fd = testing::ConnectLoopback(s.port);
  t0 = Clock::now();
  const std::string slow = "GET /health HTTP/1.1\r\nHost: a\r\n\r\n";
  bool closed = false;
  for (char c : slow) {
    if (!testing::SendAll(fd, std::string(1, c))) {
      closed = true;
      break;
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 300) > 0) {
      closed = true;
      break;
    }
  }
  ::close(fd);
  EXPECT_TRUE(closed);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 3.0);
  // An idle keep-alive connection is closed after --idle-timeout-s, silently.
  fd = testing::ConnectLoopback(s.port);
  testing::SendAll(fd, "GET /health HTTP/1.1\r\nHost: a\r\n\r\n");
  ex = testing::ReadResponses(fd, 1, 3000);
  ASSERT_EQ(ex.responses.size(), 1u);
  t0 = Clock::now();
  ex = testing::ReadResponses(fd, 1, 4000);
  ::close(fd);
  EXPECT_TRUE(ex.closed);
  EXPECT_TRUE(ex.responses.empty());
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.5);
}

// 200 connections trickling a byte every 200 ms (the issue's attack) while ordinary requests
// go on: each ordinary request is answered at once, and every slow one is cut at its deadline.
TEST(GatewayHostile, SlowClientsDoNotStarveOthers) {
  TestGateway s("x", 1, {}, {}, 64 << 10, [](HttpTransportConfig* c) {
    Tight(c);
    c->max_connections_per_client = 0;
    c->max_connections = 1000;
    c->handler_threads = 4;  // far fewer threads than slow clients
  });
  constexpr int kSlow = 200;
  std::vector<int> fds;
  for (int i = 0; i < kSlow; ++i) {
    int fd = testing::ConnectLoopback(s.port);
    ASSERT_GE(fd, 0);
    fds.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    const std::string head = "POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\n";
    for (size_t k = 0; k < head.size() && !stop.load(); ++k) {
      for (int fd : fds) ::send(fd, head.data() + k, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  double worst = 0;
  for (int i = 0; i < 20; ++i) {
    auto t0 = Clock::now();
    HttpResult r = s.Get("/health");
    worst = std::max(worst, std::chrono::duration<double>(Clock::now() - t0).count());
    EXPECT_EQ(r.status, 200);
  }
  EXPECT_LT(worst, 1.0) << "an ordinary request waited behind slow clients";
  EXPECT_EQ(s.Post("/v1/chat/completions", kChat).status, 200);
  // Every slow connection is answered 408 (or closed) by its head deadline.
  int cut = 0;
  for (int fd : fds) {
    Exchange ex = testing::ReadResponses(fd, 1, 3000);
    if (ex.closed || (!ex.responses.empty() && ex.responses[0].status == 408)) ++cut;
  }
  stop = true;
  trickle.join();
  for (int fd : fds) ::close(fd);
  EXPECT_EQ(cut, kSlow);
}

TEST(GatewayHostile, ConnectionCapsAnswerAndClose) {
  TestGateway s("x", 1, {}, {}, 64 << 10, [](HttpTransportConfig* c) {
    Tight(c);
    c->idle_timeout_s = 10;
    c->header_timeout_s = 10;
    c->max_connections_per_client = 4;
    c->max_connections = 6;
  });
  std::vector<int> held;
  for (int i = 0; i < 4; ++i) held.push_back(testing::ConnectLoopback(s.port));
  for (int i = 0; i < 200 && s.http->transport().connections() < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(s.http->transport().connections(), 4);
  Exchange ex = testing::RawExchange(s.port, "GET /health HTTP/1.1\r\nHost: a\r\n\r\n");
  ASSERT_EQ(ex.responses.size(), 1u);
  EXPECT_EQ(ex.responses[0].status, 429);
  EXPECT_TRUE(IsJsonError(ex.responses[0]));
  EXPECT_NE(ex.responses[0].body.find("--max-connections-per-client"), std::string::npos);
  EXPECT_TRUE(ex.closed);
  // The held connections still work; one closed frees a place.
  testing::SendAll(held[0], "GET /health HTTP/1.1\r\nHost: a\r\n\r\n");
  ex = testing::ReadResponses(held[0], 1, 3000);
  ASSERT_EQ(ex.responses.size(), 1u);
  EXPECT_EQ(ex.responses[0].status, 200);
  ::close(held[0]);
  held.erase(held.begin());
  for (int i = 0; i < 200 && s.http->transport().connections() > 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(s.Get("/health").status, 200);
  for (int fd : held) ::close(fd);
  EXPECT_GE(s.http->transport().rejected_connections(), 1);
}

// Random mutations of valid requests (bit flips, inserted, deleted and repeated bytes, cuts,
// duplicated lines): whatever comes back is well-framed HTTP with a JSON error body, nothing
// hangs past the deadlines, and the server is healthy afterwards.
TEST(GatewayHostile, RandomMutationsNeverCrashHangOrAnswerNonJson) {
  TestGateway s("fine", 1, {}, {}, 64 << 10, [](HttpTransportConfig* c) {
    Tight(c);
    c->read_timeout_s = 1;
    c->max_connections_per_client = 0;
  });
  const std::vector<std::string> seeds = {
      testing::RequestBytes("POST", "/v1/chat/completions", kChat),
      testing::RequestBytes("POST", "/v1/completions", R"({"model":"m","prompt":"a","max_tokens":2})"),
      "POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n" + kChat.substr(0, 16) +
          "\r\n" + absl::StrCat(absl::Hex(kChat.size() - 16)) + "\r\n" + kChat.substr(16) + "\r\n0\r\n\r\n",
      "GET /health HTTP/1.1\r\nHost: a\r\n\r\n" + kSmuggled,
  };
  std::mt19937 rng(20);
  constexpr int kCases = 320;
  std::vector<std::string> cases;
  for (int i = 0; i < kCases; ++i) {
    std::string m = seeds[i % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !m.empty(); ++e) {
      const size_t at = rng() % m.size();
      switch (rng() % 6) {
        case 0: m[at] = static_cast<char>(m[at] ^ (1 << (rng() % 8))); break;
        case 1: m.insert(at, 1, static_cast<char>(rng())); break;
        case 2: m.erase(at, 1 + rng() % 8); break;
        case 3: m.insert(at, m.substr(at, 1 + rng() % 32)); break;
        case 4: m.resize(at); break;
        default: {
          const size_t line = m.rfind("\r\n", at);
          const size_t end = m.find("\r\n", at);
          if (line != std::string::npos && end != std::string::npos) m.insert(end, m.substr(line, end - line));
        }
      }
    }
    cases.push_back(std::move(m));
  }
  std::atomic<int> next{0}, bad{0}, hung{0};
  std::mutex mu;
  std::vector<std::string> failures;
  auto run = [&] {
    for (int i = next++; i < kCases; i = next++) {
      Exchange ex = testing::RawExchange(s.port, cases[i], /*want=*/3, /*timeout_ms=*/5000);
      if (!ex.closed && ex.responses.size() < 3) {
        // Fine only if the server answered and is waiting for the next request.
        if (ex.responses.empty()) ++hung;
      }
      for (const auto& r : ex.responses) {
        if (r.status >= 400 && !IsJsonError(r)) {
          ++bad;
          std::lock_guard<std::mutex> lock(mu);
          failures.push_back(absl::StrCat(r.status, " ", r.body.substr(0, 200)));
        }
      }
    }
  };
  std::vector<std::thread> ts;
  for (int t = 0; t < 16; ++t) ts.emplace_back(run);
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0) << (failures.empty() ? "" : failures[0]);
  EXPECT_EQ(hung.load(), 0) << "a connection got neither an answer nor a close within 5 s";
  EXPECT_EQ(s.Get("/health").status, 200);
}

}  // namespace
}  // namespace moe::gateway
