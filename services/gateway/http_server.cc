#include "services/gateway/http_server.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/base/json.h"
#include "common/base/log.h"
#include "common/base/status.h"

namespace moe::gateway {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string TransportErrorBody(int status, std::string_view code, std::string_view message) {
  ApiError e;
  e.http_status = status;
  e.type = status >= 500 ? "server_error" : "invalid_request_error";
  e.code = std::string(code);
  e.message = std::string(message);
  return DumpJson(e.ToJson());
}

namespace {

// The serving logic's view of the client: the exchange's stream, gone when the client left
// or the gateway is stopping.
// The SSE head goes out with the first write, so an error before it can still be a plain
// HTTP error (503 + Retry-After) instead of a 200 stream.
class ExchangeStream final : public ClientStream {
 public:
  ExchangeStream(HttpExchange* x, const HttpTransport* t) : x_(x), t_(t) {}
  bool Write(std::string_view data) override {
    if (!x_->responded() &&
        !x_->BeginStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}})) {
      return false;
    }
    return x_->WriteStream(data);
  }
  bool Gone() override { return t_->stopping() || x_->PeerGone(); }

 private:
  HttpExchange* x_;
  const HttpTransport* t_;
};

HttpHeaders ReplyHeaders(const HttpReply& r) {
  HttpHeaders h;
  for (const auto& kv : r.headers) h.push_back(kv);
  return h;
}

}  // namespace

GatewayHttpServer::GatewayHttpServer(HttpConfig config, OpenAIServing* serving, const ApiKeys* keys,
                                     AdmissionController* admission, SequencePlacer* placer, Metrics* metrics)
    : config_(std::move(config)),
      serving_(serving),
      keys_(keys),
      admission_(admission),
      placer_(placer),
      metrics_(metrics) {
  HttpTransportConfig tc = config_.transport;
  tc.error_body = TransportErrorBody;
  transport_ = std::make_unique<HttpTransport>(std::move(tc), [this](HttpExchange& x) { Handle(x); });
}

GatewayHttpServer::~GatewayHttpServer() { Stop(); }

absl::StatusOr<int> GatewayHttpServer::Bind() { return transport_->Bind(); }
absl::Status GatewayHttpServer::Serve() { return transport_->Serve(); }
void GatewayHttpServer::Stop() { transport_->Stop(); }

void GatewayHttpServer::ReplyError(HttpExchange& x, const ApiError& e) {
  HttpReply r = ErrorReply(e);
  x.Reply(r.status, r.content_type, r.body, ReplyHeaders(r));
}

bool GatewayHttpServer::Authenticate(HttpExchange& x, std::string* key) {
  auto k = keys_->Check(x.request().HeaderOr("authorization"));
  if (auto* e = std::get_if<ApiError>(&k)) {
    ReplyError(x, *e);
    return false;
  }
  *key = std::get<std::string>(k);
  return true;
}

void GatewayHttpServer::Handle(HttpExchange& x) {
  const HttpRequest& req = x.request();
  const std::string& m = req.method;
  const bool get = m == "GET" || m == "HEAD";
  auto method_not_allowed = [&](const char* allow) {
    ApiError e;
    e.http_status = 405;
    e.code = "method_not_allowed";
    e.message = absl::StrCat(m.substr(0, 16), " is not allowed on ", req.path, " (allowed: ", allow, ")");
    HttpReply r = ErrorReply(e);
    x.Reply(r.status, r.content_type, r.body, {{"Allow", allow}});
  };
  if (req.path == "/v1/chat/completions" || req.path == "/v1/completions") {
    if (m != "POST") return method_not_allowed("POST");
    return Generate(x, req.path == "/v1/chat/completions");
  }
  if (req.path == "/tokenize" || req.path == "/detokenize") {
    if (m != "POST") return method_not_allowed("POST");
    std::string key;
    if (!Authenticate(x, &key)) return;
    HttpReply r = req.path == "/tokenize" ? serving_->Tokenize(req.body) : serving_->Detokenize(req.body);
    x.Reply(r.status, r.content_type, r.body, ReplyHeaders(r));
    return;
  }
  if (req.path == "/admin/workers") {
    if (!get) return method_not_allowed("GET, HEAD");
    std::string key;
    if (!Authenticate(x, &key)) return;
    x.Reply(200, "application/json", DumpJson(serving_->WorkersJson()));
    return;
  }
  if (req.path == "/v1/models") {
    if (!get) return method_not_allowed("GET, HEAD");
    std::string key;
    if (!Authenticate(x, &key)) return;
    x.Reply(200, "application/json", DumpJson(serving_->ModelsJson()));
    return;
  }
  if (req.path == "/health") {
    if (!get) return method_not_allowed("GET, HEAD");
    // The truth as the last probes and streams saw it: a worker whose steps fail (its
    // expertd gone) is out of rotation, with the reason.
    int alive = 0;
    json workers = json::array();
    for (const WorkerSnapshot& w : placer_->Snapshot()) {
      alive += w.alive ? 1 : 0;
      json wj{{"name", w.name}, {"alive", w.alive}, {"active", w.active}};
      if (!w.alive) wj["error"] = w.last_error;
      workers.push_back(std::move(wj));
    }
    json j{{"status", alive > 0 ? "ok" : "unavailable"},
           {"workers_alive", alive},
           {"workers", placer_->size()},
           {"worker_status", std::move(workers)},
           {"running", admission_->running()},
           {"queued", admission_->queued()}};
    HttpHeaders h;
    if (alive == 0) h.emplace_back("Retry-After", "1");
    x.Reply(alive > 0 ? 200 : 503, "application/json", DumpJson(j), h);
    return;
  }
  if (req.path == "/metrics") {
    if (!get) return method_not_allowed("GET, HEAD");
    x.Reply(200, "text/plain; version=0.0.4", metrics_->Render(admission_, placer_));
    return;
  }
  ApiError e;
  e.http_status = 404;
  e.type = "not_found_error";
  e.code = "unknown_url";
  e.message = absl::StrCat("unknown route ", m.substr(0, 16), " ", req.path.substr(0, 256));
  ReplyError(x, e);
}

void GatewayHttpServer::Generate(HttpExchange& x, bool chat) {
  const std::string endpoint = chat ? "chat" : "completions";
  const auto t0 = Clock::now();
  auto account = [&](int status) {
    metrics_->ObserveRequest(endpoint, status, std::chrono::duration<double>(Clock::now() - t0).count());
  };
  auto fail = [&](const ApiError& e) {
    ReplyError(x, e);
    account(e.http_status);
  };
  std::string key;
  if (!Authenticate(x, &key)) return account(401);
  if (transport_->stopping()) return fail(FromStatus(absl::UnavailableError("the gateway is shutting down")));
  const std::string& body = x.request().body;
  auto prepared = chat ? serving_->PrepareChat(body, key) : serving_->PrepareCompletion(body, key);
  if (auto* e = std::get_if<ApiError>(&prepared)) return fail(*e);
  std::unique_ptr<PreparedRequest> p = std::move(std::get<std::unique_ptr<PreparedRequest>>(prepared));
  ExchangeStream io(&x, transport_.get());
  if (!p->common.stream) {
    HttpReply r = serving_->RunUnary(*p, &io);
    p->ticket.reset();
    x.Reply(r.status, r.content_type, r.body, ReplyHeaders(r));
    account(r.status);
    return;
  }
  OpenAIServing::StreamOutcome out = serving_->RunStream(*p, &io);
  p->ticket.reset();
  if (out.error) return fail(*out.error);
  x.EndStream();
  account(out.status);
}

}  // namespace moe::gateway
