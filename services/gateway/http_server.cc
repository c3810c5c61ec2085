#include "services/gateway/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/json.h"
#include "common/base/log.h"
#include "common/base/status.h"
#include "httplib.h"

namespace moe::gateway {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

absl::Status ParseListenAddress(const std::string& spec, std::string* host, int* port, bool* unix_socket) {
  if (spec.rfind("unix:", 0) == 0) {
    *unix_socket = true;
    *host = spec.substr(5);
    *port = 0;
    if (host->empty()) return absl::InvalidArgumentError("--listen unix: needs a path");
    if (host->size() >= sizeof(sockaddr_un::sun_path)) {
      return absl::InvalidArgumentError(absl::StrCat("--listen: unix socket path too long: ", *host));
    }
    return absl::OkStatus();
  }
  *unix_socket = false;
  size_t colon = spec.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(absl::StrCat("--listen: expected HOST:PORT or unix:/path, got '", spec, "'"));
  }
  *host = spec.substr(0, colon);
  if (!absl::SimpleAtoi(AV(std::string_view(spec).substr(colon + 1)), port) || *port < 0 || *port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--listen: bad port in '", spec, "'"));
  }
  return absl::OkStatus();
}

namespace {

// The connection socket of the request this thread is serving (-1: none).
thread_local int tls_conn_fd = -1;

bool PeerGone(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, static_cast<short>(POLLRDHUP), 0};
  int r = ::poll(&p, 1, 0);
  return r > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

bool WaitFd(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  while (true) {
    int r = ::poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    return r > 0 && (p.revents & (events | POLLHUP | POLLERR)) != 0;
  }
}

// httplib::Stream over a connected socket, with a read buffer (httplib
// reads request lines one byte at a time).
class SockStream final : public httplib::Stream {
 public:
  SockStream(int fd, int read_timeout_ms, int write_timeout_ms)
      : fd_(fd), read_ms_(read_timeout_ms), write_ms_(write_timeout_ms) {}

  bool is_readable() const override { return pos_ < len_ || WaitFd(fd_, POLLIN, read_ms_); }
  bool is_writable() const override { return WaitFd(fd_, POLLOUT, write_ms_) && !PeerGone(fd_); }
  bool buffered() const { return pos_ < len_; }

  ssize_t read(char* ptr, size_t size) override {
    if (pos_ >= len_) {
      if (!WaitFd(fd_, POLLIN, read_ms_)) return -1;
      ssize_t r;
      do {
        r = ::recv(fd_, buf_, sizeof(buf_), 0);
      } while (r < 0 && errno == EINTR);
      if (r <= 0) return r;
      pos_ = 0;
      len_ = static_cast<size_t>(r);
    }
    size_t n = std::min(size, len_ - pos_);
    std::memcpy(ptr, buf_ + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    size_t done = 0;
    while (done < size) {
      if (!WaitFd(fd_, POLLOUT, write_ms_)) return -1;
      ssize_t r = ::send(fd_, ptr + done, size - done, MSG_NOSIGNAL);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return -1;
      done += static_cast<size_t>(r);
    }
    return static_cast<ssize_t>(size);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { Addr(false, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { Addr(true, ip, port); }
  socket_t socket() const override { return fd_; }

 private:
  void Addr(bool local, std::string& ip, int& port) const {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    int r = local ? ::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len)
                  : ::getpeername(fd_, reinterpret_cast<sockaddr*>(&ss), &len);
    ip.clear();
    port = 0;
    if (r != 0) return;
    char buf[INET6_ADDRSTRLEN] = {0};
    if (ss.ss_family == AF_INET) {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      ::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
      port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      ::inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
      port = ntohs(a->sin6_port);
    } else {
      std::strcpy(buf, "unix");
    }
    ip = buf;
  }

  int fd_;
  int read_ms_;
  int write_ms_;
  char buf_[8192];
  size_t pos_ = 0;
  size_t len_ = 0;
};

}  // namespace

// httplib::Server whose per-connection loop is ours (to know the socket).
class GatewayHttpServer::Server final : public httplib::Server {
 public:
  explicit Server(const HttpConfig& c, const std::atomic<bool>* stopping) : c_(c), stopping_(stopping) {}

 public:
  // httplib 0.11 listens with a backlog of 5 (compiled into Debian's
  // library): 32 clients connecting at once overflow it (SYN retries of
  // 1 s, resets). Listening again on the bound socket raises it.
  bool RaiseBacklog(int n) { return ::listen(svr_sock_.load(), n) == 0; }

 private:
  bool process_and_close_socket(socket_t sock) override {
    tls_conn_fd = sock;
    SockStream strm(sock, c_.read_timeout_s * 1000, c_.write_timeout_s * 1000);
    bool ret = false;
    for (int count = 100; count > 0 && !stopping_->load(); --count) {
      if (!strm.buffered()) {
        // Wait for the next request on this keep-alive connection.
        bool readable = false;
        for (int waited = 0; waited < c_.keep_alive_s * 1000 && !stopping_->load(); waited += 100) {
          if (WaitFd(sock, POLLIN, 100)) {
            readable = true;
            break;
          }
        }
        if (!readable) break;
      }
      bool connection_closed = false;
      ret = process_request(strm, /*close_connection=*/count == 1, connection_closed,
                            [](httplib::Request&) {});
      if (!ret || connection_closed) break;
    }
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    tls_conn_fd = -1;
    return ret;
  }

  const HttpConfig& c_;
  const std::atomic<bool>* stopping_;
};

namespace {

class HttpClientStream final : public ClientStream {
 public:
  HttpClientStream(httplib::DataSink* sink, const std::atomic<bool>* stopping)
      : sink_(sink), stopping_(stopping), fd_(tls_conn_fd) {}
  bool Write(std::string_view data) override {
    if (failed_ || !sink_) return false;
    if (!sink_->write(data.data(), data.size())) failed_ = true;
    return !failed_;
  }
  bool Gone() override {
    if (!failed_ && (stopping_->load() || PeerGone(fd_))) failed_ = true;
    return failed_;
  }

 private:
  httplib::DataSink* sink_;
  const std::atomic<bool>* stopping_;
  int fd_;
  bool failed_ = false;
};

void Reply(httplib::Response& res, const HttpReply& r) {
  res.status = r.status;
  for (const auto& [k, v] : r.headers) res.set_header(k.c_str(), v);
  res.set_content(r.body, r.content_type.c_str());
}

}  // namespace

GatewayHttpServer::GatewayHttpServer(HttpConfig config, OpenAIServing* serving, const ApiKeys* keys,
                                     AdmissionController* admission, SequencePlacer* placer, Metrics* metrics)
    : config_(std::move(config)),
      serving_(serving),
      keys_(keys),
      admission_(admission),
      placer_(placer),
      metrics_(metrics),
      server_(std::make_unique<Server>(config_, &stopping_)) {
  Routes();
}

GatewayHttpServer::~GatewayHttpServer() { Stop(); }

void GatewayHttpServer::Routes() {
  Server& s = *server_;
  const int threads = config_.threads;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  s.set_payload_max_length(config_.max_body_bytes);
  s.set_read_timeout(config_.read_timeout_s);
  s.set_write_timeout(config_.write_timeout_s);
  s.set_keep_alive_timeout(config_.keep_alive_s);
  s.set_tcp_nodelay(true);

  const size_t max_body = config_.max_body_bytes;
  // httplib calls this outside its try: nothing here may throw (DumpJson never throws on
  // the client's bytes, which reach the message through the method and path).
  s.set_error_handler([max_body](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    try {
      ApiError e;
      const std::string what = req.method.substr(0, 16) + " " + req.path.substr(0, 256);
      if (res.status == 413) {
        e = BadRequest(absl::StrCat("request body is larger than the limit of ", max_body, " bytes (--max-body)"), "",
                       "body_too_large");
        res.status = 400;
      } else if (res.status == 404) {
        e.http_status = 404;
        e.type = "not_found_error";
        e.code = "unknown_url";
        e.message = "unknown route " + what;
      } else {
        e.http_status = res.status;
        e.type = res.status >= 500 ? "server_error" : "invalid_request_error";
        e.message = absl::StrCat("HTTP ", res.status, " for ", what);
      }
      res.set_content(DumpJson(e.ToJson()), "application/json");
    } catch (...) {
      res.set_content(R"({"error":{"message":"internal error","type":"server_error","param":null,"code":null}})",
                      "application/json");
    }
  });

  auto authenticate = [this](const httplib::Request& req, httplib::Response& res, std::string* key) {
    auto k = keys_->Check(req.get_header_value("Authorization"));
    if (auto* e = std::get_if<ApiError>(&k)) {
      Reply(res, ErrorReply(*e));
      return false;
    }
    *key = std::get<std::string>(k);
    return true;
  };

  auto generate = [this, authenticate](const httplib::Request& req, httplib::Response& res, bool chat) {
    const std::string endpoint = chat ? "chat" : "completions";
    auto t0 = Clock::now();
    auto account = [this, endpoint, t0](int status) {
      metrics_->ObserveRequest(endpoint, status, std::chrono::duration<double>(Clock::now() - t0).count());
    };
    std::string key;
    if (!authenticate(req, res, &key)) {
      account(res.status);
      return;
    }
    if (stopping_.load()) {
      ApiError e = FromStatus(absl::UnavailableError("the gateway is shutting down"));
      Reply(res, ErrorReply(e));
      account(e.http_status);
      return;
    }
    auto prepared = chat ? serving_->PrepareChat(req.body, key) : serving_->PrepareCompletion(req.body, key);
    if (auto* e = std::get_if<ApiError>(&prepared)) {
      Reply(res, ErrorReply(*e));
      account(e->http_status);
      return;
    }
    std::shared_ptr<PreparedRequest> p = std::move(std::get<std::unique_ptr<PreparedRequest>>(prepared));
    if (!p->common.stream) {
      HttpClientStream io(nullptr, &stopping_);
      HttpReply r = serving_->RunUnary(*p, &io);
      p->ticket.reset();
      Reply(res, r);
      account(r.status);
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, p, account](size_t /*offset*/, httplib::DataSink& sink) {
          HttpClientStream io(&sink, &stopping_);
          int status = serving_->RunStream(*p, &io);
          p->ticket.reset();
          account(status);
          sink.done();
          return true;
        },
        [p](bool /*success*/) { p->ticket.reset(); });
  };

  s.Post("/v1/chat/completions",
         [generate](const httplib::Request& req, httplib::Response& res) { generate(req, res, true); });
  s.Post("/v1/completions",
         [generate](const httplib::Request& req, httplib::Response& res) { generate(req, res, false); });
  s.Get("/v1/models", [this, authenticate](const httplib::Request& req, httplib::Response& res) {
    std::string key;
    if (!authenticate(req, res, &key)) return;
    res.set_content(DumpJson(serving_->ModelsJson()), "application/json");
  });
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    int alive = placer_->alive_count();
    json j{{"status", alive > 0 ? "ok" : "unavailable"},
           {"workers_alive", alive},
           {"workers", placer_->size()},
           {"running", admission_->running()},
           {"queued", admission_->queued()}};
    res.status = alive > 0 ? 200 : 503;
    res.set_content(DumpJson(j), "application/json");
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_->Render(admission_, placer_), "text/plain; version=0.0.4");
  });
}

absl::StatusOr<int> GatewayHttpServer::Bind() {
  std::string host;
  int port = 0;
  bool unix_socket = false;
  MOE_RETURN_IF_ERROR(ParseListenAddress(config_.listen, &host, &port, &unix_socket));
  if (unix_socket) {
    ::unlink(host.c_str());
    server_->set_address_family(AF_UNIX);
    if (!server_->bind_to_port(host, 80)) {
      return absl::UnavailableError(absl::StrCat("cannot listen on unix socket ", host));
    }
    server_->RaiseBacklog(1024);
    return 0;
  }
  if (port == 0) {
    int p = server_->bind_to_any_port(host);
    if (p <= 0) return absl::UnavailableError(absl::StrCat("cannot bind ", host, ":any"));
    server_->RaiseBacklog(1024);
    return p;
  }
  if (!server_->bind_to_port(host, port)) {
    return absl::UnavailableError(absl::StrCat("cannot bind ", config_.listen, " (in use, or a bad host?)"));
  }
  server_->RaiseBacklog(1024);
  return port;
}

absl::Status GatewayHttpServer::Serve() {
  if (!server_->listen_after_bind() && !stopping_.load()) {
    return absl::InternalError("HTTP server stopped unexpectedly");
  }
  return absl::OkStatus();
}

void GatewayHttpServer::Stop() {
  stopping_.store(true);
  server_->stop();
}

}  // namespace moe::gateway
