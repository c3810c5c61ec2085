// A minimal HTTP/1.1 test client over raw loopback sockets: sends exactly the bytes a test
// gives (malformed ones too) and parses what comes back with Beast's response parser, so a
// test sees every response on the connection and whether the server closed it.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace moe::gateway::testing {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct HttpResult {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
  std::string Header(const std::string& lower) const {
    for (const auto& [k, v] : headers) {
      if (k == lower) return v;
    }
    return "";
  }
};

struct Exchange {
  std::vector<HttpResult> responses;
  bool closed = false;  // the server closed the connection
  std::string rest;     // bytes after the last complete response
};

inline int ConnectLoopback(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline bool SendAll(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Reads from `fd` until `want` responses are complete, the server closes, or `timeout_ms`.
inline Exchange ReadResponses(int fd, int want, int timeout_ms = 5000, std::string pending = "") {
  namespace http = boost::beast::http;
  Exchange ex;
  auto parser = std::make_unique<http::response_parser<http::string_body>>();
  parser->body_limit(64 << 20);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  char buf[16384];
  while (static_cast<int>(ex.responses.size()) < want) {
    while (!pending.empty()) {
      boost::system::error_code ec;
      size_t n = parser->put(boost::asio::const_buffer(pending.data(), pending.size()), ec);
      pending.erase(0, n);
      if (ec == http::error::need_more) break;
      if (ec) {
        ex.rest = pending;
        return ex;
      }
      if (parser->is_done()) {
        HttpResult r;
        auto& m = parser->get();
        r.status = static_cast<int>(m.result_int());
        for (const auto& f : m) {
          std::string k(f.name_string().data(), f.name_string().size());
          for (char& c : k) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
          r.headers.emplace_back(k, std::string(f.value().data(), f.value().size()));
        }
        r.body = m.body();
        ex.responses.push_back(std::move(r));
        parser = std::make_unique<http::response_parser<http::string_body>>();
        parser->body_limit(64 << 20);
        if (static_cast<int>(ex.responses.size()) >= want) break;
      }
      if (n == 0) break;
    }
    if (static_cast<int>(ex.responses.size()) >= want) break;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) break;
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      ex.closed = true;
      boost::system::error_code ec;
      if (parser->is_header_done()) parser->put_eof(ec);  // a close-delimited body ends here
      if (!ec && parser->is_done()) {
        HttpResult r;
        r.status = static_cast<int>(parser->get().result_int());
        r.body = parser->get().body();
        ex.responses.push_back(std::move(r));
      }
      break;
    }
    pending.append(buf, static_cast<size_t>(n));
  }
  ex.rest = pending;
  if (!ex.closed) {
    // Closed right after the last response?
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) > 0) {
      ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_PEEK);
      if (n == 0) ex.closed = true;
    }
  }
  return ex;
}

// One connection: send `bytes`, read up to `want` responses.
inline Exchange RawExchange(int port, const std::string& bytes, int want = 1, int timeout_ms = 5000) {
  int fd = ConnectLoopback(port);
  if (fd < 0) return {};
  SendAll(fd, bytes);
  Exchange ex = ReadResponses(fd, want, timeout_ms);
  ::close(fd);
  return ex;
}

inline std::string RequestBytes(const std::string& method, const std::string& path, const std::string& body = "",
                                const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  std::string r = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  bool has_type = false;
  for (const auto& [k, v] : headers) {
    r += k + ": " + v + "\r\n";
    if (k == "Content-Type") has_type = true;
  }
  if (!body.empty() && !has_type) r += "Content-Type: application/json\r\n";
  if (method == "POST" || !body.empty()) r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  r += "\r\n" + body;
  return r;
}

// One request on a fresh connection; status 0 when nothing came back.
inline HttpResult Request(int port, const std::string& method, const std::string& path, const std::string& body = "",
                          const std::vector<std::pair<std::string, std::string>>& headers = {},
                          int timeout_ms = 10000) {
  Exchange ex = RawExchange(port, RequestBytes(method, path, body, headers), 1, timeout_ms);
  return ex.responses.empty() ? HttpResult{} : ex.responses[0];
}

}  // namespace moe::gateway::testing
