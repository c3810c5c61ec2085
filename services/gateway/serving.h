// Endpoint logic of the OpenAI API, free of HTTP: prepare (parse, validate,
// tokenize, check the context, admit), then run (fan out n sequences,
// detokenize, match stop strings, parse reasoning/tool calls, build the
// response or stream SSE chunks). http_server.cc maps routes onto this.
//
// Policies (documented for users in docs/SERVING.md):
//  - prompt_tokens >= max_context, or prompt_tokens + max_tokens > max_context:
//    400 context_length_exceeded (never truncated). max_tokens omitted: fill
//    the context (chat) / 16 (completions, OpenAI's default).
//  - n > 1: n independent sequences, choice i gets seed + i when a seed is
//    given (same request + seed -> same output), independent entropy otherwise.
//  - stop strings are matched here, across token boundaries, on the text
//    before reasoning/tool-call parsing, from min_tokens on; the matched choice
//    is cancelled on its worker at once; the stop string reaches the client
//    only with include_stop_str_in_output.
//  - /v1/completions with a batch of P prompts: P * n choices, choice i from
//    prompt i / n (seed + i % n, so a prompt's choices do not depend on the batch).
//  - client gone (ClientStream::Gone or a failed write): every sequence of
//    the request is cancelled; the workers stop them within one step.
//  - streams: the first write happens at the first token (or keep-alive); an
//    SSE comment goes out after sse_keepalive without a write.
// Thread safety: OpenAIServing is shared by all HTTP threads; each
// PreparedRequest belongs to one thread.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "services/gateway/admission.h"
#include "services/gateway/metrics.h"
#include "services/gateway/protocol.h"
#include "services/gateway/sequence_placer.h"
#include "services/gateway/structured_request.h"
#include "services/gateway/text_codec.h"

namespace moe::gateway {

struct ServingConfig {
  std::string model_name = "moestream";
  int64_t max_context = 4096;
  std::chrono::milliseconds poll{10};  // client-gone check while waiting for tokens
  int max_n = 16;
  int max_json_depth = kDefaultMaxJsonDepth;  // --max-json-depth
  int max_prompts = 32;                       // prompts in one /v1/completions batch
  StructuredConfig structured;                // --structured-max-whitespace, --structured-max-repeat
  // Streams: an SSE comment after this long without a write (queue waits, long prefills,
  // stalled steps), so clients and proxies do not time the stream out. 0: never.
  std::chrono::milliseconds sse_keepalive{15000};  // --sse-keepalive-s
  // A request generating longer than this is ended: 504 generation_timeout (or that error
  // event on a stream). 0: no deadline.
  std::chrono::milliseconds generation_timeout{0};  // --generation-timeout-s
};

struct HttpReply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
};

HttpReply ErrorReply(const ApiError& e);

// The client side of one request, as the logic sees it.
class ClientStream {
 public:
  virtual ~ClientStream() = default;
  virtual bool Write(std::string_view data) = 0;  // false: client gone
  virtual bool Gone() = 0;                        // cheap; true once the client disconnected
};

struct PreparedRequest {
  bool chat = true;
  ChatRequest chat_request;
  CompletionRequest completion_request;
  CommonRequest common;
  // One prompt (chat), or the batch of /v1/completions: choice i is prompt i / n.
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> echo;  // completions with echo: each prompt's text
  bool opens_reasoning = false;  // chat: the prompt ends inside a reasoning block
  int32_t max_tokens = 0;
  std::vector<int32_t> stop_ids;  // the model's (unless ignore_eos) + the client's
  BuiltConstraint constraint;
  ResponseMeta meta;
  std::unique_ptr<AdmissionController::Ticket> ticket;
  std::chrono::steady_clock::time_point start;
  // Filled by the run, for the access log and metrics.
  Usage usage;
  double ttft_s = -1;                        // first token after start; -1: none
  std::vector<std::string> finish_reasons;   // per choice that finished
};

class OpenAIServing {
 public:
  OpenAIServing(ServingConfig config, const TextCodec* codec, SequencePlacer* placer, AdmissionController* admission,
                Metrics* metrics);

  const ServingConfig& config() const { return config_; }
  ProtocolLimits limits() const;

  std::variant<std::unique_ptr<PreparedRequest>, ApiError> PrepareChat(std::string_view body,
                                                                       const std::string& key);
  std::variant<std::unique_ptr<PreparedRequest>, ApiError> PrepareCompletion(std::string_view body,
                                                                             const std::string& key);
  // Non-streaming: runs to the end; `io` is only asked Gone().
  HttpReply RunUnary(PreparedRequest& req, ClientStream* io);
  // Streaming: writes SSE frames to `io` until [DONE] or the client is gone. An error that
  // comes before anything was written (no worker could take the request) is returned in
  // `error` instead, for the caller to answer with its HTTP status (503 + Retry-After), not
  // as a 200 stream; after the first write an error is an SSE error event, then [DONE].
  struct StreamOutcome {
    int status = 200;               // to account the request under
    std::optional<ApiError> error;  // set: nothing was written
  };
  StreamOutcome RunStream(PreparedRequest& req, ClientStream* io);

  nlohmann::json ModelsJson() const;
  // vLLM's POST /tokenize ({prompt} or {messages}; count, max_model_len, tokens, token_strs)
  // and POST /detokenize ({tokens} -> {prompt}).
  HttpReply Tokenize(std::string_view body);
  HttpReply Detokenize(std::string_view body);
  // GET /admin/workers: every worker's model, load, KV and prefix-cache use, structured-output
  // vocabulary (and whether it matches the gateway's), last error.
  nlohmann::json WorkersJson() const;
  const TextCodec& codec() const { return *codec_; }
  uint64_t vocab_fingerprint() const { return vocab_fingerprint_; }

  // Ends every running generation with `why` (Unavailable): the drain deadline on SIGTERM.
  // Streams get it as an error event and [DONE]; later requests fail at once.
  void AbortAll(const std::string& why);

 public:
  struct Sink;  // receives deltas: collects (unary) or writes (stream)

 private:
  // Runs the sequences; returns an error when generation failed.
  std::optional<ApiError> Generate(PreparedRequest& req, ClientStream* io, Sink* sink, Usage* usage);
  std::optional<ApiError> Admit(PreparedRequest* req, const std::string& key);
  std::string NewId(const char* prefix);

  const ServingConfig config_;
  const TextCodec* codec_;
  SequencePlacer* placer_;
  AdmissionController* admission_;
  Metrics* metrics_;
  std::mutex rng_mu_;
  std::mt19937_64 rng_;
  uint64_t vocab_fingerprint_ = 0;  // of codec_->TokenTexts(): sent with constrained requests
  std::atomic<bool> aborted_{false};
  std::mutex abort_mu_;
  std::string abort_why_;
};

}  // namespace moe::gateway
