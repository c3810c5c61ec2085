#include "services/gateway/http_transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "common/base/status.h"

namespace moe::gateway {

namespace asio = boost::asio;
using Socket = asio::generic::stream_protocol::socket;
using Acceptor = asio::basic_socket_acceptor<asio::generic::stream_protocol>;
using Clock = std::chrono::steady_clock;
using ErrorCode = boost::system::error_code;

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
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  if (!absl::SimpleAtoi(AV(std::string_view(spec).substr(colon + 1)), port) || *port < 0 || *port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--listen: bad port in '", spec, "'"));
  }
  return absl::OkStatus();
}

const char* HttpReason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return status < 400 ? "OK" : status < 500 ? "Client Error" : "Server Error";
  }
}

namespace {

// Header name/value bytes a handler might pass on from a client must not split the head.
std::string HeaderSafe(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) out += (c == '\r' || c == '\n' || c == '\0') ? ' ' : c;
  return out;
}

std::string ResponseHead(int version, int status, std::string_view content_type, const HttpHeaders& headers,
                         std::string_view framing, bool close) {
  std::string h = absl::StrCat(version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ", status, " ", HttpReason(status), "\r\n");
  if (!content_type.empty()) absl::StrAppend(&h, "Content-Type: ", HeaderSafe(content_type), "\r\n");
  for (const auto& [k, v] : headers) absl::StrAppend(&h, HeaderSafe(k), ": ", HeaderSafe(v), "\r\n");
  h += framing;
  if (close) {
    h += "Connection: close\r\n";
  } else if (version == 10) {
    h += "Connection: keep-alive\r\n";
  }
  h += "\r\n";
  return h;
}

std::string PeerAddress(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "unknown";
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, buf, sizeof(buf));
    return buf;
  }
  if (ss.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr, buf, sizeof(buf));
    std::string s = buf;
    if (s.rfind("::ffff:", 0) == 0 && s.find('.') != std::string::npos) s = s.substr(7);  // v4-mapped
    return s;
  }
  return "unix";
}

// Fixed pool of handler threads, FIFO.
class HandlerPool {
 public:
  explicit HandlerPool(int threads) : threads_(threads) {}
  ~HandlerPool() { Join(); }
  void Start() {
    for (int i = 0; i < threads_; ++i) workers_.emplace_back([this] { Run(); });
  }
  void Post(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }
  void Join() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

 private:
  void Run() {
    while (true) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return done_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }
  const int threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> workers_;
  bool done_ = false;
};

}  // namespace

class HttpTransport::Impl {
 public:
  Impl(HttpTransport* owner, HttpTransportConfig config, HttpHandler handler)
      : owner(owner),
        config(std::move(config)),
        handler(std::move(handler)),
        acceptor(io),
        accept_retry(io),
        pool(std::max(1, this->config.handler_threads)) {}

  std::string ErrorBody(int status, std::string_view code, std::string_view message) const {
    if (config.error_body) return config.error_body(status, code, message);
    return std::string(message);
  }

  void Accept();
  void OnAccepted(Socket socket);
  void Released(const std::string& client);

  HttpTransport* owner;
  const HttpTransportConfig config;
  const HttpHandler handler;
  asio::io_context io;
  Acceptor acceptor;
  asio::steady_timer accept_retry;
  bool unix_socket = false;
  std::string unix_path;
  HandlerPool pool;
  std::unique_ptr<asio::executor_work_guard<asio::io_context::executor_type>> work;
  // I/O thread only.
  std::unordered_map<std::string, int> per_client;
  std::unordered_set<std::shared_ptr<Session>> sessions;
};

// One connection. Its reading side runs on the I/O thread; while a request is being handled
// (state kHandling) only that handler thread touches the socket, then it posts back.
class HttpTransport::Session final : public std::enable_shared_from_this<Session>, public HttpExchange {
 public:
  Session(Impl* t, Socket socket, std::string client, bool counted)
      : t_(t),
        socket_(std::move(socket)),
        timer_(t->io),
        reader_(t->config.limits),
        client_(std::move(client)),
        counted_(counted) {}

  void Start() { ReadNext(/*first=*/true); }

  // Stop(): an idle connection closes now; others finish their request.
  void StopIfIdle() {
    if (state_ == kReading && reader_.state() == HttpRequestReader::State::kIdle) Close();
  }

  // Answers `status` at once and closes (connection caps at accept).
  void Reject(int status, std::string_view code, std::string_view message) {
    SendErrorAndClose(status, code, message);
  }

  // ---- HttpExchange (handler thread) ----
  const HttpRequest& request() const override { return request_; }

  bool Reply(int status, std::string_view content_type, std::string_view body, const HttpHeaders& headers) override {
    if (responded_) return false;
    responded_ = true;
    status_ = status;
    const bool head = request_.method == "HEAD";
    std::string out = ResponseHead(request_.version, status, content_type, headers,
                                   absl::StrCat("Content-Length: ", body.size(), "\r\n"), WillClose());
    if (!head) out.append(body);
    return WriteAll(out);
  }

  bool BeginStream(int status, std::string_view content_type, const HttpHeaders& headers) override {
    if (responded_) return false;
    responded_ = true;
    status_ = status;
    streaming_ = true;
    chunked_ = request_.version == 11;
    if (!chunked_) close_after_ = true;  // HTTP/1.0: the end of the body is the end of the connection
    return WriteAll(ResponseHead(request_.version, status, content_type, headers,
                                 chunked_ ? "Transfer-Encoding: chunked\r\n" : "", WillClose()));
  }

  bool WriteStream(std::string_view data) override {
    if (!streaming_ || ended_ || data.empty()) return !failed_;
    if (!chunked_) return WriteAll(data);
    std::string out = absl::StrCat(absl::Hex(data.size()), "\r\n");
    out.append(data);
    out += "\r\n";
    return WriteAll(out);
  }

  bool EndStream() override {
    if (!streaming_ || ended_) return !failed_;
    ended_ = true;
    return chunked_ ? WriteAll("0\r\n\r\n") : !failed_;
  }

  bool PeerGone() override {
    if (failed_) return true;
    pollfd p{socket_.native_handle(), static_cast<short>(POLLRDHUP), 0};
    if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0) failed_ = true;
    return failed_;
  }

  bool responded() const override { return responded_; }
  int status() const override { return status_; }
  void CloseAfterResponse() override { close_after_ = true; }

 private:
  enum State { kReading, kHandling, kClosing, kClosed };

  bool WillClose() const {
    return close_after_ || !request_.keep_alive || t_->owner->draining() ||
           served_ >= t_->config.max_requests_per_connection;
  }

  // Blocking write from the handler thread with the write deadline (the socket itself is
  // non-blocking: Asio owns it; nothing else uses it while the handler runs).
  bool WriteAll(std::string_view data) {
    if (failed_) return false;
    const int fd = socket_.native_handle();
    const auto deadline = Clock::now() + std::chrono::seconds(t_->config.write_timeout_s);
    size_t done = 0;
    while (done < data.size()) {
      ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left > 0) {
          pollfd p{fd, POLLOUT, 0};
          const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
          if (r < 0 && errno == EINTR) continue;
          if (r >= 0 && (p.revents & (POLLHUP | POLLERR | POLLNVAL)) == 0) continue;
        }
      }
      failed_ = true;
      return false;
    }
    return true;
  }

  void ReadNext(bool first) {
    state_ = kReading;
    request_ = HttpRequest();
    responded_ = streaming_ = chunked_ = ended_ = false;
    status_ = 0;
    HttpRequestReader::State st = reader_.Feed("");  // pipelined bytes already buffered
    if (st != HttpRequestReader::State::kIdle) {
      request_started_ = Clock::now();
    }
    if (Advance(st)) return;
    if (st == HttpRequestReader::State::kIdle) {
      Arm(first ? std::chrono::seconds(t_->config.header_timeout_s) : std::chrono::seconds(t_->config.idle_timeout_s));
    } else {
      ArmForState(st);
    }
    DoRead();
  }

  // Acts on a finished or failed request; true when reading stops.
  bool Advance(HttpRequestReader::State st) {
    if (st == HttpRequestReader::State::kDone) {
      Dispatch();
      return true;
    }
    if (st == HttpRequestReader::State::kError) {
      const HttpFramingError& e = reader_.error();
      SendErrorAndClose(e.status, e.code, e.message);
      return true;
    }
    return false;
  }

  void ArmForState(HttpRequestReader::State st) {
    const auto limit = st == HttpRequestReader::State::kHead ? std::chrono::seconds(t_->config.header_timeout_s)
                                                              : std::chrono::seconds(t_->config.read_timeout_s);
    Arm(request_started_ + limit - Clock::now());
  }

  void Arm(Clock::duration d) {
    timed_out_ = false;
    timer_.expires_after(d);
    timer_.async_wait([self = shared_from_this()](const ErrorCode& ec) {
      if (ec || self->state_ != kReading) return;
      self->timed_out_ = true;
      ErrorCode ignored;
      self->socket_.cancel(ignored);  // the pending read completes with operation_aborted
    });
  }

  void DoRead() {
    socket_.async_read_some(asio::buffer(buf_), [self = shared_from_this()](const ErrorCode& ec, size_t n) {
      self->OnRead(ec, n);
    });
  }

  void OnRead(const ErrorCode& ec, size_t n) {
    if (state_ != kReading) return;
    if (timed_out_) {
      if (reader_.state() == HttpRequestReader::State::kIdle) return Close();
      const bool head = reader_.state() == HttpRequestReader::State::kHead;
      return SendErrorAndClose(408, "request_timeout",
                               head ? absl::StrCat("the request head did not arrive within ", t_->config.header_timeout_s,
                                                   " s (--header-timeout-s)")
                                    : absl::StrCat("the request did not arrive within ", t_->config.read_timeout_s,
                                                   " s (--read-timeout-s)"));
    }
    if (ec == asio::error::eof) {
      if (Advance(reader_.FeedEof())) return;
      return Close();
    }
    if (ec) return Close();
    const auto before = reader_.state();
    const auto st = reader_.Feed(std::string_view(buf_, n));
    if (before == HttpRequestReader::State::kIdle && st != before) request_started_ = Clock::now();
    if (Advance(st)) return;
    if (st != before) ArmForState(st);
    if (st == HttpRequestReader::State::kBody && reader_.expects_continue()) {
      reader_.clear_continue();
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      asio::async_write(socket_, asio::buffer(kContinue), [self = shared_from_this()](const ErrorCode& ec, size_t) {
        if (ec) return self->Close();
        self->DoRead();
      });
      return;
    }
    DoRead();
  }

  void Dispatch() {
    timer_.cancel();
    state_ = kHandling;
    request_ = reader_.TakeRequest();
    request_.peer = client_;
    ++served_;
    t_->pool.Post([self = shared_from_this()] { self->RunHandler(); });
  }

  void RunHandler() {
    try {
      t_->handler(*this);
    } catch (const std::exception& e) {
      MOE_LOG(ERROR) << "http: handler for " << request_.method.substr(0, 16) << " " << request_.path.substr(0, 256)
                     << " threw: " << e.what();
      failed_ = failed_ || responded_;
    } catch (...) {
      MOE_LOG(ERROR) << "http: handler threw a non-exception";
      failed_ = failed_ || responded_;
    }
    if (!responded_) {
      Reply(500, "application/json", t_->ErrorBody(500, "internal_error", "the request handler produced no response"),
            {});
    }
    if (streaming_ && !ended_) EndStream();
    const bool keep = !failed_ && !WillClose();
    asio::post(t_->io, [self = shared_from_this(), keep] {
      if (self->state_ == kClosed) return;
      if (keep) return self->ReadNext(/*first=*/false);
      self->LingerAndClose();
    });
  }

  void SendErrorAndClose(int status, std::string_view code, std::string_view message) {
    state_ = kClosing;
    std::string body = t_->ErrorBody(status, code, message);
    out_ = ResponseHead(11, status, "application/json", {}, absl::StrCat("Content-Length: ", body.size(), "\r\n"),
                        /*close=*/true) +
           body;
    timer_.expires_after(std::chrono::seconds(t_->config.write_timeout_s));
    timer_.async_wait([self = shared_from_this()](const ErrorCode& ec) {
      if (!ec) self->Close();
    });
    asio::async_write(socket_, asio::buffer(out_), [self = shared_from_this()](const ErrorCode& ec, size_t) {
      if (ec) return self->Close();
      self->LingerAndClose();
    });
  }

  // Half-close, then read and drop what the client still sends (up to twice --max-body,
  // 2 s): closing with unread input resets the connection, and a client still sending a
  // body we refused (413) would lose our answer to it.
  void LingerAndClose() {
    if (state_ == kClosed) return;
    state_ = kClosing;
    ErrorCode ignored;
    socket_.shutdown(asio::socket_base::shutdown_send, ignored);
    timer_.expires_after(std::chrono::seconds(2));
    timer_.async_wait([self = shared_from_this()](const ErrorCode& ec) {
      if (!ec) self->Close();
    });
    Drain();
  }

  void Drain() {
    socket_.async_read_some(asio::buffer(buf_), [self = shared_from_this()](const ErrorCode& ec, size_t n) {
      self->drained_ += n;
      if (ec || self->drained_ > std::max<size_t>(64 << 10, 2 * self->t_->config.limits.max_body_bytes)) {
        return self->Close();
      }
      self->Drain();
    });
  }

  void Close() {
    if (state_ == kClosed) return;
    state_ = kClosed;
    timer_.cancel();
    ErrorCode ignored;
    socket_.close(ignored);
    if (counted_) t_->Released(client_);
    t_->sessions.erase(shared_from_this());
  }

  Impl* t_;
  Socket socket_;
  asio::steady_timer timer_;
  HttpRequestReader reader_;
  const std::string client_;
  const bool counted_;
  State state_ = kReading;
  char buf_[16 << 10];
  std::string out_;
  size_t drained_ = 0;
  bool timed_out_ = false;
  Clock::time_point request_started_ = Clock::now();
  int served_ = 0;
  // The exchange (handler thread while kHandling).
  HttpRequest request_;
  bool responded_ = false, streaming_ = false, chunked_ = false, ended_ = false;
  int status_ = 0;
  bool close_after_ = false;
  bool failed_ = false;
};

void HttpTransport::Impl::Accept() {
  acceptor.async_accept([this](const ErrorCode& ec, Socket socket) {
    if (owner->stopping() || !acceptor.is_open()) return;
    if (ec) {
      // EMFILE/ENFILE and the like: wait a moment rather than spin; the listen queue holds.
      MOE_LOG(WARNING) << "http: accept failed: " << ec.message();
      accept_retry.expires_after(std::chrono::milliseconds(100));
      accept_retry.async_wait([this](const ErrorCode& e) {
        if (!e) Accept();
      });
      return;
    }
    OnAccepted(std::move(socket));
    Accept();
  });
}

void HttpTransport::Impl::OnAccepted(Socket socket) {
  const int fd = socket.native_handle();
  if (!unix_socket) {
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  const std::string client = unix_socket ? "unix" : PeerAddress(fd);
  int& mine = per_client[client];
  const bool over_total = owner->open_connections_.load() >= config.max_connections;
  const bool over_client =
      !unix_socket && config.max_connections_per_client > 0 && mine >= config.max_connections_per_client;
  if (over_total || over_client) {
    if (mine == 0) per_client.erase(client);
    owner->rejected_connections_.fetch_add(1);
    auto s = std::make_shared<Session>(this, std::move(socket), client, /*counted=*/false);
    sessions.insert(s);
    if (over_total) {
      s->Reject(503, "too_many_connections",
                absl::StrCat("the server has ", config.max_connections, " connections open (--max-connections)"));
    } else {
      s->Reject(429, "too_many_connections",
                absl::StrCat("client ", client, " has ", config.max_connections_per_client,
                             " connections open (--max-connections-per-client)"));
    }
    return;
  }
  ++mine;
  owner->open_connections_.fetch_add(1);
  auto s = std::make_shared<Session>(this, std::move(socket), client, /*counted=*/true);
  sessions.insert(s);
  s->Start();
}

void HttpTransport::Impl::Released(const std::string& client) {
  auto it = per_client.find(client);
  if (it != per_client.end() && --it->second <= 0) per_client.erase(it);
  owner->open_connections_.fetch_sub(1);
}

HttpTransport::HttpTransport(HttpTransportConfig config, HttpHandler handler)
    : impl_(std::make_unique<Impl>(this, std::move(config), std::move(handler))) {}

HttpTransport::~HttpTransport() {
  Stop();
  impl_->pool.Join();
}

absl::StatusOr<int> HttpTransport::Bind() {
  std::string host;
  int port = 0;
  bool unix_socket = false;
  MOE_RETURN_IF_ERROR(ParseListenAddress(impl_->config.listen, &host, &port, &unix_socket));
  ErrorCode ec;
  asio::generic::stream_protocol::endpoint ep;
  if (unix_socket) {
    ::unlink(host.c_str());
    ep = asio::generic::stream_protocol::endpoint(asio::local::stream_protocol::endpoint(host));
    impl_->unix_socket = true;
    impl_->unix_path = host;
  } else {
    asio::ip::tcp::resolver resolver(impl_->io);
    auto results = resolver.resolve(host, std::to_string(port), asio::ip::tcp::resolver::numeric_service, ec);
    if (ec || results.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--listen: cannot resolve '", host, "': ", ec.message()));
    }
    ep = asio::generic::stream_protocol::endpoint(results.begin()->endpoint());
  }
  Acceptor& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  if (!ec && !unix_socket) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(1024, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", impl_->config.listen, ": ", ec.message()));
  }
  if (unix_socket) return 0;
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(a.native_handle(), reinterpret_cast<sockaddr*>(&ss), &len);
  return ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                  : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

absl::Status HttpTransport::Serve() {
  if (!impl_->acceptor.is_open()) return absl::FailedPreconditionError("HttpTransport::Serve before Bind");
  impl_->work = std::make_unique<asio::executor_work_guard<asio::io_context::executor_type>>(
      asio::make_work_guard(impl_->io));
  impl_->pool.Start();
  asio::post(impl_->io, [this] {
    if (!stopping()) impl_->Accept();
  });
  impl_->io.run();
  // Requests still being handled when run() ran out of work finish here; then their
  // connections close (briefly lingering, as always).
  impl_->pool.Join();
  impl_->io.restart();
  impl_->io.run_for(std::chrono::seconds(3));
  if (impl_->unix_socket) ::unlink(impl_->unix_path.c_str());
  return absl::OkStatus();
}

void HttpTransport::Stop() {
  if (stopping_.exchange(true)) return;
  asio::post(impl_->io, [this] {
    ErrorCode ignored;
    impl_->acceptor.close(ignored);
    impl_->accept_retry.cancel();
    std::vector<std::shared_ptr<Session>> all(impl_->sessions.begin(), impl_->sessions.end());
    for (auto& s : all) s->StopIfIdle();
    impl_->work.reset();  // run() returns once the last connection has closed
  });
}

}  // namespace moe::gateway
