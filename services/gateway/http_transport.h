// The gateway's HTTP/1.x server transport on Boost.Asio + Beast's parser
// (http_request_reader.h): accept, read requests with deadlines, run the route handler on
// a thread pool, write its response or stream, keep-alive or close.
//
// Why not cpp-httplib (0.11, Debian's): it keeps a connection open after a request it could
// not parse (so header lines and bodies were served as new requests), has no header-count
// limit, checks --max-body on the wire bytes only (chunked, length-less and gzip bodies went
// past it), holds a thread per connection for as long as a client trickles bytes (200 slow
// clients blocked everyone), and calls its error handler outside its try. Its parser is
// compiled into libcpp-httplib.so: none of that can change without re-implementing its
// internals (docs/SERVING.md "HTTP library").
//
// Shape: one I/O thread (accept, read, parse, small error replies, timers) never blocks on a
// handler; a request is handed to a pool of `handler_threads` only when it is complete, so a
// slow or silent client costs a socket and a buffer, never a thread. Handlers write from
// their thread straight to the socket with a write deadline (HttpExchange).
// Rules, each a flag (docs/SERVING.md "Limits"):
//  - header_timeout_s: from a request's first byte to the end of its head; read_timeout_s:
//    to the end of its body (408 request_timeout, then close); idle_timeout_s: keep-alive
//    wait for the next request (then close, silently);
//  - write_timeout_s: a write that cannot progress this long fails; the client is gone;
//  - max_connections in all (503) and max_connections_per_client per client address (429;
//    not applied on unix sockets, whose clients have no address), answered and closed at
//    accept;
//  - framing errors (http_request_reader.h) are answered and the connection closed, reading
//    and discarding what the client still sends for a moment so the answer is not lost to a
//    reset.
// Thread safety: Bind/Serve on one thread; Stop from any; HttpExchange on its handler thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "services/gateway/http_request.h"
#include "services/gateway/http_request_reader.h"

namespace moe::gateway {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpTransportConfig {
  std::string listen = "127.0.0.1:8000";  // HOST:PORT or unix:/path
  HttpLimits limits;
  int handler_threads = 128;
  int header_timeout_s = 10;
  int read_timeout_s = 30;
  int write_timeout_s = 30;
  int idle_timeout_s = 5;
  int max_connections = 512;
  int max_connections_per_client = 64;  // 0: no per-client cap
  int max_requests_per_connection = 1000;
  // The body of a reply the transport makes itself (framing errors, timeouts, caps).
  std::function<std::string(int status, std::string_view code, std::string_view message)> error_body;
};

// One request and its response, on a handler thread. Each write returns false once the
// client is gone (a failed or timed-out write, or the peer closed); later writes do nothing.
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  virtual const HttpRequest& request() const = 0;
  // A whole response with Content-Length (no body for HEAD).
  virtual bool Reply(int status, std::string_view content_type, std::string_view body,
                     const HttpHeaders& headers = {}) = 0;
  // A streamed response: chunked on HTTP/1.1, close-delimited on 1.0.
  virtual bool BeginStream(int status, std::string_view content_type, const HttpHeaders& headers = {}) = 0;
  virtual bool WriteStream(std::string_view data) = 0;
  virtual bool EndStream() = 0;
  // Cheap; true once the client disconnected (POLLRDHUP) or a write failed.
  virtual bool PeerGone() = 0;
  virtual bool responded() const = 0;
  // The status sent (0: nothing yet).
  virtual int status() const = 0;
  // Close the connection after this response (no keep-alive).
  virtual void CloseAfterResponse() = 0;
};

using HttpHandler = std::function<void(HttpExchange&)>;

class HttpTransport {
 public:
  HttpTransport(HttpTransportConfig config, HttpHandler handler);
  ~HttpTransport();

  // Binds; returns the bound TCP port (0 for unix sockets).
  absl::StatusOr<int> Bind();
  // Serves until Stop() and until every connection has closed. Bind() first.
  absl::Status Serve();
  // Stops accepting and closes idle connections; requests being served run to their end
  // (their handlers see stopping()), then their connections close.
  void Stop();
  bool stopping() const { return stopping_.load(); }
  // Draining (SIGTERM): still accepting, but every response closes its connection.
  void SetDraining() { draining_.store(true); }
  bool draining() const { return draining_.load() || stopping_.load(); }
  // Connections open now (for /metrics and tests).
  int connections() const { return open_connections_.load(); }
  int64_t rejected_connections() const { return rejected_connections_.load(); }

 private:
  class Impl;
  class Session;
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> draining_{false};
  std::atomic<int> open_connections_{0};
  std::atomic<int64_t> rejected_connections_{0};
};

// Splits "host:port" / "unix:/path" (exposed for tests and the flags check).
absl::Status ParseListenAddress(const std::string& spec, std::string* host, int* port, bool* unix_socket);

// "HTTP/1.1 404 Not Found"-style reason phrase.
const char* HttpReason(int status);

}  // namespace moe::gateway
