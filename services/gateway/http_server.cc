#include "services/gateway/http_server.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <thread>

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

// Adds headers (CORS) to whatever response the route sends.
class HeaderedExchange final : public HttpExchange {
 public:
  HeaderedExchange(HttpExchange* x, HttpHeaders extra) : x_(x), extra_(std::move(extra)) {}
  const HttpRequest& request() const override { return x_->request(); }
  bool Reply(int status, std::string_view type, std::string_view body, const HttpHeaders& h) override {
    return x_->Reply(status, type, body, With(h));
  }
  bool BeginStream(int status, std::string_view type, const HttpHeaders& h) override {
    return x_->BeginStream(status, type, With(h));
  }
  bool WriteStream(std::string_view data) override { return x_->WriteStream(data); }
  bool EndStream() override { return x_->EndStream(); }
  bool PeerGone() override { return x_->PeerGone(); }
  bool responded() const override { return x_->responded(); }
  int status() const override { return x_->status(); }
  void CloseAfterResponse() override { x_->CloseAfterResponse(); }

 private:
  HttpHeaders With(const HttpHeaders& h) const {
    HttpHeaders all = h;
    all.insert(all.end(), extra_.begin(), extra_.end());
    return all;
  }
  HttpExchange* x_;
  HttpHeaders extra_;
};

std::string UtcNow() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[96];  // room for any int the format can print (-Wformat-truncation)
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  return buf;
}

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
  auto k = keys_->Check(x.request().HeaderOr("authorization"), x.request().HeaderOr("x-api-key"));
  if (auto* e = std::get_if<ApiError>(&k)) {
    ReplyError(x, *e);
    return false;
  }
  *key = std::get<std::string>(k);
  return true;
}

bool GatewayHttpServer::OriginAllowed(const std::string& origin) const {
  for (const auto& o : config_.allowed_origins) {
    if (o == "*" || o == origin) return true;
  }
  return false;
}

void GatewayHttpServer::Drain(std::chrono::milliseconds grace) {
  draining_.store(true);
  transport_->SetDraining();
  const auto deadline = Clock::now() + grace;
  auto busy = [&] { return admission_->running() + admission_->queued() > 0; };
  while (busy() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (busy()) {
    MOE_LOG(WARNING) << "gateway: drain time (" << grace.count() / 1000.0 << " s) over with "
                     << admission_->running() << " requests running; ending them";
    serving_->AbortAll("the gateway is shutting down (--drain-seconds passed)");
    const auto end = Clock::now() + std::chrono::seconds(5);
    while (busy() && Clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Stop();
}

void GatewayHttpServer::Handle(HttpExchange& raw) {
  const auto t0 = Clock::now();
  const HttpRequest& req = raw.request();
  json log{{"ts", UtcNow()}, {"method", req.method.substr(0, 16)}, {"route", req.path.substr(0, 256)},
           {"client", req.peer}};
  HttpHeaders cors;
  const std::string* origin = req.Header("origin");
  const bool cors_ok = origin != nullptr && OriginAllowed(*origin);
  if (cors_ok) {
    const bool any = std::find(config_.allowed_origins.begin(), config_.allowed_origins.end(), "*") !=
                     config_.allowed_origins.end();
    cors.emplace_back("Access-Control-Allow-Origin", any ? "*" : *origin);
    if (!any) cors.emplace_back("Vary", "Origin");
    cors.emplace_back("Access-Control-Expose-Headers", "Retry-After");
  }
  HeaderedExchange x(&raw, std::move(cors));
  const bool known = req.path == "/v1/chat/completions" || req.path == "/v1/completions" || req.path == "/v1/models" ||
                     req.path == "/health" || req.path == "/metrics";
  if (req.method == "OPTIONS" && known) {
    // A CORS preflight (or a plain OPTIONS): what the route allows.
    const std::string allow = req.path.rfind("/v1/c", 0) == 0 ? "POST, OPTIONS" : "GET, HEAD, OPTIONS";
    if (origin != nullptr && !cors_ok) {
      ApiError e;
      e.http_status = 403;
      e.code = "origin_not_allowed";
      e.message = "origin " + origin->substr(0, 256) + " is not allowed (--allowed-origins)";
      ReplyError(x, e);
    } else {
      HttpHeaders h{{"Allow", allow}};
      if (cors_ok) {
        h.emplace_back("Access-Control-Allow-Methods", allow);
        h.emplace_back("Access-Control-Allow-Headers",
                       "Authorization, Content-Type, X-Api-Key, OpenAI-Organization, OpenAI-Project");
        h.emplace_back("Access-Control-Max-Age", "600");
      }
      x.Reply(204, "", "", h);
    }
  } else {
    Route(x, &log);
  }
  log["status"] = x.status();
  log["latency_ms"] = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (config_.access_log) config_.access_log->Write(log);
}

void GatewayHttpServer::Route(HttpExchange& x, json* log) {
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
    if (m != "POST") return method_not_allowed("POST, OPTIONS");
    return Generate(x, req.path == "/v1/chat/completions", log);
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
    if (!get) return method_not_allowed("GET, HEAD, OPTIONS");
    std::string key;
    if (!Authenticate(x, &key)) return;
    x.Reply(200, "application/json", DumpJson(serving_->ModelsJson()));
    return;
  }
  if (req.path == "/health") {
    if (!get) return method_not_allowed("GET, HEAD, OPTIONS");
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
    if (!get) return method_not_allowed("GET, HEAD, OPTIONS");
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

void GatewayHttpServer::Generate(HttpExchange& x, bool chat, json* log) {
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
  if (draining_.load() || transport_->stopping()) {
    return fail(FromStatus(absl::UnavailableError("the gateway is shutting down")));
  }
  const std::string& body = x.request().body;
  auto prepared = chat ? serving_->PrepareChat(body, key) : serving_->PrepareCompletion(body, key);
  if (auto* e = std::get_if<ApiError>(&prepared)) return fail(*e);
  std::unique_ptr<PreparedRequest> p = std::move(std::get<std::unique_ptr<PreparedRequest>>(prepared));
  // This request's fields of its access-log line (Handle writes the line once answered).
  struct LogFields {
    json* log;
    const PreparedRequest* p;
    ~LogFields() {
      (*log)["id"] = p->meta.id;
      (*log)["stream"] = p->common.stream;
      size_t prompt_tokens = 0;  // all prompts of a completions batch
      for (const auto& pr : p->prompts) prompt_tokens += pr.size();
      (*log)["prompt_tokens"] = static_cast<int>(prompt_tokens);
      (*log)["completion_tokens"] = p->usage.completion_tokens;
      (*log)["ttft_ms"] = p->ttft_s >= 0 ? json(p->ttft_s * 1000.0) : json(nullptr);
      (*log)["finish_reasons"] = p->finish_reasons;
    }
  } fields{log, p.get()};
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
