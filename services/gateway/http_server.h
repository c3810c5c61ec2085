// HTTP routes of the gateway on cpp-httplib (Debian libcpp-httplib 0.11.4):
//   POST /v1/chat/completions, POST /v1/completions, GET /v1/models,
//   GET /health, GET /metrics.
// Routes only: authenticate, size-check, hand the body to OpenAIServing,
// write its reply or its SSE stream.
//
// Client-gone detection: httplib 0.11 does not tell a handler that its
// client left, so this server keeps the connection's socket for the handler
// thread (it runs httplib's request processing over its own socket stream)
// and polls it (POLLRDHUP) while tokens are awaited — a disconnect is seen
// within `ServingConfig::poll` (10 ms), not at the next failed write.
//
// Binding: "HOST:PORT" (TCP; 127.0.0.1 unless asked otherwise) or
// "unix:/path" (a unix socket). Stop() ends Listen() after in-flight
// requests are cancelled.
// Thread safety: one instance; Listen() on one thread, Stop() from any.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "services/gateway/admission.h"
#include "services/gateway/metrics.h"
#include "services/gateway/serving.h"

namespace moe::gateway {

struct HttpConfig {
  std::string listen = "127.0.0.1:8000";
  size_t max_body_bytes = 8 << 20;
  int threads = 128;  // connections served at once (streams hold one each)
  int read_timeout_s = 30;
  int write_timeout_s = 30;
  int keep_alive_s = 5;
};

class GatewayHttpServer {
 public:
  GatewayHttpServer(HttpConfig config, OpenAIServing* serving, const ApiKeys* keys, AdmissionController* admission,
                    SequencePlacer* placer, Metrics* metrics);
  ~GatewayHttpServer();

  // Binds; returns the bound TCP port (0 for unix sockets).
  absl::StatusOr<int> Bind();
  // Serves until Stop(). Bind() first.
  absl::Status Serve();
  void Stop();
  bool stopping() const { return stopping_.load(); }

 private:
  class Server;
  void Routes();

  const HttpConfig config_;
  OpenAIServing* serving_;
  const ApiKeys* keys_;
  AdmissionController* admission_;
  SequencePlacer* placer_;
  Metrics* metrics_;
  std::unique_ptr<Server> server_;
  std::atomic<bool> stopping_{false};
};

// Splits "host:port" / "unix:/path" (exposed for tests and the flags check).
absl::Status ParseListenAddress(const std::string& spec, std::string* host, int* port, bool* unix_socket);

}  // namespace moe::gateway
