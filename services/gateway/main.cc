// gateway: the OpenAI-compatible HTTP front of moestream.
//
//   gateway --worker unix:/run/moestream/inferd0.sock --worker unix:/run/moestream/inferd1.sock
//           [--listen 127.0.0.1:8000 | --listen unix:/run/moestream/gateway.sock] [--config FILE]
//
// Binds 127.0.0.1 by default (never all interfaces unless --listen says so).
// SIGTERM/SIGINT: drain (--drain-seconds: running requests finish, new ones get 503, what
// still runs at the end gets an error), then exit 0.
#include <signal.h>
#include <sys/resource.h>

#include <condition_variable>
#include <iostream>
#include <mutex>
#include <thread>

#include "common/base/flags.h"
#include "common/base/log.h"
#include "common/base/service_main.h"
#include "common/base/status.h"
#include "services/gateway/byte_codec.h"
#include "services/gateway/grpc_worker.h"
#include "services/gateway/http_server.h"
#include "services/gateway/text_codec_model.h"
#include "services/gateway/vocab_check.h"

namespace {

using namespace moe;
using namespace moe::gateway;

// Raises the soft RLIMIT_NOFILE to `needed` when the hard limit allows; an error naming both
// numbers when it does not (accept() would start failing under load instead).
absl::Status EnsureFileDescriptors(int64_t needed) {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return absl::OkStatus();
  if (rl.rlim_cur != RLIM_INFINITY && static_cast<int64_t>(rl.rlim_cur) < needed) {
    rlim_t want = static_cast<rlim_t>(needed);
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want) {
      return absl::ResourceExhaustedError(absl::StrCat("needs ", needed, " file descriptors; RLIMIT_NOFILE allows ",
                                                       rl.rlim_max, " (raise it, e.g. LimitNOFILE=, or lower the flag)"));
    }
    rl.rlim_cur = want;
    if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) {
      return absl::ResourceExhaustedError(absl::StrCat("cannot raise RLIMIT_NOFILE to ", needed));
    }
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  // Signals are taken by one thread (sigwait); block them everywhere first.
  sigset_t sigs = BlockStopSignals();

  std::string listen = "127.0.0.1:8000";
  std::vector<std::string> workers;
  std::string model_name = "moestream";
  int64_t max_model_len = 0;
  std::string tokenizer = "byte";
  std::string chat_template, chat_template_name;
  std::vector<std::string> api_keys;
  std::string api_keys_file;
  int64_t max_running = 64, max_queued = 64, per_key_limit = 0, retry_after = 1;
  uint64_t max_body = 8 << 20;
  int64_t http_threads = 0;
  uint64_t max_header_bytes = 32 << 10;
  int64_t max_headers = 100, header_timeout_s = 10, read_timeout_s = 30, write_timeout_s = 30, idle_timeout_s = 5;
  int64_t max_connections = 512, max_conn_per_client = 64;
  int64_t probe_ms = 1000;
  int64_t startup_wait_s = 60;
  int64_t max_n = 16;
  int64_t client_poll_ms = 10;
  int64_t max_json_depth = kDefaultMaxJsonDepth;
  double sse_keepalive_s = 15;
  double generation_timeout_s = 0, drain_seconds = 10;
  std::vector<std::string> allowed_origins;
  std::string access_log_path = "-";
  int64_t structured_max_whitespace = StructuredConfig{}.max_whitespace;
  int64_t structured_max_repeat = StructuredConfig{}.max_repeat;

  FlagSet flags("gateway", "OpenAI-compatible HTTP gateway over inferd workers.");
  flags.AddString("listen", &listen, "HOST:PORT or unix:/path (default 127.0.0.1:8000)");
  flags.AddStringList("worker", &workers, "inferd address (unix:/path or host:port); repeat per worker");
  flags.AddString("served-model-name", &model_name, "model id clients send in 'model'");
  flags.AddInt("max-model-len", &max_model_len, "context length (0: the smallest the workers report)");
  flags.AddString("tokenizer", &tokenizer,
                  "model directory with tokenizer.json + chat template, or 'byte' (byte-level, test models)");
  flags.AddString("chat-template", &chat_template,
                  "Jinja chat template file to use instead of the model's own (chat_template.jinja or "
                  "tokenizer_config.json's)");
  flags.AddString("chat-template-name", &chat_template_name,
                  "which of tokenizer_config.json's named chat templates (default: transformers' choice)");
  flags.AddStringList("api-key", &api_keys, "accepted API key (repeatable); none + no file = open server");
  flags.AddString("api-keys-file", &api_keys_file, "file with one API key per line");
  flags.AddInt("max-running", &max_running, "requests generating at once");
  flags.AddInt("max-queued", &max_queued, "requests waiting beyond that (then 503)");
  flags.AddInt("per-key-limit", &per_key_limit, "concurrent requests per API key (0: no limit; then 429)");
  flags.AddInt("retry-after", &retry_after, "Retry-After seconds on 503/429");
  flags.AddBytes("max-body", &max_body, "largest request body, after Content-Encoding decoding (larger: 413)");
  flags.AddInt("http-threads", &http_threads, "request handler threads (0: max-running + max-queued + 16)");
  flags.AddBytes("max-header-bytes", &max_header_bytes, "largest request head: request line + header fields (431)");
  flags.AddInt("max-headers", &max_headers, "most header fields in a request (431)");
  flags.AddInt("header-timeout-s", &header_timeout_s, "a request's head must arrive within this (408, then close)");
  flags.AddInt("read-timeout-s", &read_timeout_s, "a whole request must arrive within this (408, then close)");
  flags.AddInt("write-timeout-s", &write_timeout_s, "a write blocked this long drops the client");
  flags.AddInt("idle-timeout-s", &idle_timeout_s, "keep-alive connections idle this long are closed");
  flags.AddInt("max-connections", &max_connections, "open client connections in all (more: 503 and close)");
  flags.AddInt("max-connections-per-client", &max_conn_per_client,
               "open connections per client address (more: 429 and close; 0: no cap; not on unix sockets)");
  flags.AddInt("probe-ms", &probe_ms, "worker health probe period");
  flags.AddInt("startup-wait-s", &startup_wait_s, "wait this long for a first live worker");
  flags.AddInt("max-n", &max_n, "largest 'n' accepted");
  flags.AddInt("max-json-depth", &max_json_depth, "deepest nesting of request JSON accepted (deeper: 400)");
  flags.AddDouble("sse-keepalive-s", &sse_keepalive_s,
                  "streams get an SSE comment after this long without a write (0: never)");
  flags.AddDouble("generation-timeout-s", &generation_timeout_s,
                  "end a request generating longer than this (504 generation_timeout; 0: no deadline)");
  flags.AddDouble("drain-seconds", &drain_seconds,
                  "on SIGTERM: running requests get this long to finish (new ones: 503), then end with an error");
  flags.AddStringList("allowed-origins", &allowed_origins,
                      "CORS: an origin browsers may call the API from ('*': any; repeatable; none: no CORS)");
  flags.AddString("access-log", &access_log_path, "one JSON line per request: a file, '-' (stderr) or '' (none)");
  flags.AddInt("structured-max-whitespace", &structured_max_whitespace,
               "structured outputs: longest run of JSON whitespace the constraint allows");
  flags.AddInt("structured-max-repeat", &structured_max_repeat,
               "structured outputs: largest length/count bound a schema may give (larger: 400 naming it)");
  flags.AddInt("client-poll-ms", &client_poll_ms, "how often a waiting request checks that its client is still there");

  if (auto code = ParseServiceFlags("gateway", flags, argc, argv)) return *code;
  auto fail = [](const absl::Status& s) {
    std::cerr << "gateway: " << s.message() << "\n";
    return 1;
  };
  if (workers.empty()) return fail(absl::InvalidArgumentError("no --worker given"));
  if (max_body < 1 || max_header_bytes < 256 || max_headers < 1 || header_timeout_s < 1 || read_timeout_s < 1 ||
      write_timeout_s < 1 || idle_timeout_s < 1 || max_connections < 1 || max_conn_per_client < 0) {
    return fail(absl::InvalidArgumentError(
        "--max-body >= 1, --max-header-bytes >= 256, --max-headers >= 1, every --*-timeout-s >= 1, "
        "--max-connections >= 1, --max-connections-per-client >= 0"));
  }
  if (max_running < 1 || max_queued < 0 || per_key_limit < 0 || max_n < 1 || probe_ms < 10 || max_json_depth < 2 ||
      max_json_depth > 1000 || structured_max_whitespace < 0 || structured_max_whitespace > 1000 ||
      structured_max_repeat < 1) {
    return fail(absl::InvalidArgumentError("--max-running >= 1, --max-queued >= 0, --per-key-limit >= 0, --max-n >= 1, "
                                           "--probe-ms >= 10, 2 <= --max-json-depth <= 1000, "
                                           "0 <= --structured-max-whitespace <= 1000, --structured-max-repeat >= 1"));
  }
  std::unique_ptr<TextCodec> codec;
  if (tokenizer == "byte" && (!chat_template.empty() || !chat_template_name.empty())) {
    return fail(absl::InvalidArgumentError("--chat-template/--chat-template-name need --tokenizer DIR (a model's)"));
  }
  if (tokenizer == "byte") {
    codec = std::make_unique<ByteCodec>();
  } else {
    auto c = ModelTextCodec::Load(tokenizer, chat_template, chat_template_name);
    if (!c.ok()) return fail(Annotate(c.status(), "--tokenizer"));
    codec = std::move(*c);
  }
  auto keys = ApiKeys::Load(api_keys, api_keys_file);
  if (!keys.ok()) return fail(keys.status());

  std::vector<std::shared_ptr<Worker>> ws;
  for (size_t i = 0; i < workers.size(); ++i) {
    ws.push_back(std::make_shared<GrpcWorker>(absl::StrCat("w", i, "(", workers[i], ")"), workers[i]));
  }
  SequencePlacer placer(ws, SequencePlacerConfig{});
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(startup_wait_s);
  placer.ProbeAll();
  while (placer.alive_count() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    placer.ProbeAll();
  }
  int64_t ctx = max_model_len;
  for (const auto& w : placer.Snapshot()) {
    if (w.alive && max_model_len == 0 && (ctx == 0 || w.info.max_context < ctx)) ctx = w.info.max_context;
  }
  // A tokenizer whose ids the model does not have would fail every request: refuse to start.
  if (absl::Status fit = CheckTokenizerFitsWorkers(tokenizer, codec->vocab_size(), placer.Snapshot());
      !fit.ok()) {
    if (tokenizer != "byte") return fail(fit);
    MOE_LOG(WARNING) << fit.message() << " (byte codec: only token-id prompts below it will work)";
  }
  // Workers that come up later are held to the same check: out of rotation, reason logged.
  if (tokenizer != "byte") {
    const int64_t vocab = codec->vocab_size();
    placer.SetAdmission([tokenizer, vocab](const std::string& worker, const WorkerInfo& info) {
      return CheckTokenizerFitsWorker(tokenizer, vocab, worker, info.vocab_size);
    });
  }
  if (ctx <= 0) {
    return fail(absl::UnavailableError(absl::StrCat("no worker answered within ", startup_wait_s,
                                                    " s and --max-model-len is not set")));
  }
  MOE_LOG(INFO) << "gateway: " << placer.alive_count() << "/" << ws.size() << " workers live, context " << ctx;

  Metrics metrics(model_name);
  AdmissionController admission({static_cast<int>(max_running), static_cast<int>(max_queued),
                                 static_cast<int>(per_key_limit), static_cast<int>(retry_after)});
  ServingConfig sc;
  sc.model_name = model_name;
  sc.max_context = ctx;
  sc.max_n = static_cast<int>(max_n);
  sc.max_json_depth = static_cast<int>(max_json_depth);
  sc.sse_keepalive = std::chrono::milliseconds(static_cast<int64_t>(std::max(0.0, sse_keepalive_s) * 1000));
  sc.generation_timeout = std::chrono::milliseconds(static_cast<int64_t>(std::max(0.0, generation_timeout_s) * 1000));
  sc.structured.max_whitespace = static_cast<int>(structured_max_whitespace);
  sc.structured.max_repeat = structured_max_repeat;
  sc.poll = std::chrono::milliseconds(std::max<int64_t>(client_poll_ms, 1));
  OpenAIServing serving(sc, codec.get(), &placer, &admission, &metrics);
  auto access_log = AccessLog::Open(access_log_path);
  if (!access_log.ok()) return fail(access_log.status());
  HttpConfig hc;
  hc.allowed_origins = allowed_origins;
  hc.access_log = access_log->get();
  HttpTransportConfig& tc = hc.transport;
  tc.listen = listen;
  tc.limits.max_body_bytes = max_body;
  tc.limits.max_header_bytes = max_header_bytes;
  tc.limits.max_headers = static_cast<int>(max_headers);
  tc.handler_threads = static_cast<int>(http_threads > 0 ? http_threads : max_running + max_queued + 16);
  tc.header_timeout_s = static_cast<int>(header_timeout_s);
  tc.read_timeout_s = static_cast<int>(read_timeout_s);
  tc.write_timeout_s = static_cast<int>(write_timeout_s);
  tc.idle_timeout_s = static_cast<int>(idle_timeout_s);
  tc.max_connections = static_cast<int>(max_connections);
  tc.max_connections_per_client = static_cast<int>(max_conn_per_client);
  if (absl::Status fds = EnsureFileDescriptors(max_connections + tc.handler_threads + 256); !fds.ok()) {
    return fail(Annotate(fds, "--max-connections"));
  }
  GatewayHttpServer server(hc, &serving, &*keys, &admission, &placer, &metrics);
  auto port = server.Bind();
  if (!port.ok()) return fail(port.status());
  MOE_LOG(INFO) << "gateway: listening on " << listen << (*port > 0 ? absl::StrCat(" (port ", *port, ")") : "");

  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::thread prober([&] {
    std::unique_lock<std::mutex> lock(mu);
    while (!cv.wait_for(lock, std::chrono::milliseconds(probe_ms), [&] { return stop; })) {
      lock.unlock();
      placer.ProbeAll();
      lock.lock();
    }
  });
  std::thread signals([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    MOE_LOG(INFO) << "gateway: signal " << sig << ", draining (--drain-seconds " << drain_seconds << ")";
    server.Drain(std::chrono::milliseconds(static_cast<int64_t>(std::max(0.0, drain_seconds) * 1000)));
  });
  absl::Status served = server.Serve();
  {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
  }
  cv.notify_all();
  prober.join();
  // The signal thread ends on its signal; when Serve() failed on its own, send one.
  if (!server.stopping()) pthread_kill(signals.native_handle(), SIGTERM);
  server.Stop();
  signals.join();
  if (listen.rfind("unix:", 0) == 0) ::unlink(listen.substr(5).c_str());
  if (!served.ok()) return fail(served);
  MOE_LOG(INFO) << "gateway: stopped";
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Main(argc, argv); }
