// HTTP routes of the gateway over HttpTransport (http_transport.h: framing, limits,
// deadlines, connection caps):
//   POST /v1/chat/completions, POST /v1/completions, GET /v1/models,
//   GET /health, GET /metrics, POST /tokenize, POST /detokenize (vLLM's shapes),
//   GET /admin/workers (per-worker detail; API key like /v1)   (GET routes also answer HEAD).
// Routes only: authenticate (Authorization: Bearer, or x-api-key), hand the body to
// OpenAIServing, write its reply or its SSE stream. An unknown path is 404 unknown_url; a
// known path with another method is 405 with Allow; OPTIONS answers CORS preflights
// (--allowed-origins). Every error reply, the transport's own included, is the API's JSON
// error shape. Every request gets one access-log line.
// Client-gone detection: the handler polls its socket (POLLRDHUP) while tokens are awaited
// (ServingConfig::poll), so a disconnect cancels the sequences within a step.
// Thread safety: one instance; Serve() on one thread, Stop() from any.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "services/gateway/access_log.h"
#include "services/gateway/admission.h"
#include "services/gateway/http_transport.h"
#include "services/gateway/metrics.h"
#include "services/gateway/serving.h"

namespace moe::gateway {

struct HttpConfig {
  HttpTransportConfig transport;
  // CORS (--allowed-origins): origins whose browsers may call the API ("*": any). Empty:
  // no CORS headers, and a preflight is answered without them (the browser refuses).
  std::vector<std::string> allowed_origins;
  AccessLog* access_log = nullptr;  // one JSON line per request; null: none
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
  // SIGTERM: new generation requests get 503 (+ Retry-After) while admitted ones finish;
  // after `grace` the rest are ended with an error (streams: an error event and [DONE]);
  // then Stop(). Blocks until then.
  void Drain(std::chrono::milliseconds grace);
  bool stopping() const { return transport_->stopping(); }
  const HttpTransport& transport() const { return *transport_; }

 private:
  void Handle(HttpExchange& x);
  void Route(HttpExchange& x, nlohmann::json* log);
  void Generate(HttpExchange& x, bool chat, nlohmann::json* log);
  bool OriginAllowed(const std::string& origin) const;
  void ReplyError(HttpExchange& x, const ApiError& e);
  bool Authenticate(HttpExchange& x, std::string* key);

  const HttpConfig config_;
  OpenAIServing* serving_;
  const ApiKeys* keys_;
  AdmissionController* admission_;
  SequencePlacer* placer_;
  Metrics* metrics_;
  std::unique_ptr<HttpTransport> transport_;
  std::atomic<bool> draining_{false};
};

// The API error body for a status the transport answers itself.
std::string TransportErrorBody(int status, std::string_view code, std::string_view message);

}  // namespace moe::gateway
