#include "services/gateway/serving.h"

#include <algorithm>
#include <condition_variable>
#include <deque>

#include "absl/strings/str_cat.h"
#include "common/base/json.h"
#include "common/base/log.h"
#include "common/base/status.h"
#include "common/structured/grammar_constraint.h"
#include "services/gateway/sse.h"
#include "services/gateway/stop_matcher.h"

namespace moe::gateway {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

HttpReply ErrorReply(const ApiError& e) {
  HttpReply r;
  r.status = e.http_status;
  r.body = DumpJson(e.ToJson());
  if (e.retry_after_s > 0) r.headers.emplace_back("Retry-After", std::to_string(e.retry_after_s));
  return r;
}

OpenAIServing::OpenAIServing(ServingConfig config, const TextCodec* codec, SequencePlacer* placer,
                             AdmissionController* admission, Metrics* metrics)
    : config_(std::move(config)),
      codec_(codec),
      placer_(placer),
      admission_(admission),
      metrics_(metrics),
      rng_(std::random_device{}()),
      vocab_fingerprint_(structured::VocabFingerprint(codec->TokenTexts())) {}

ProtocolLimits OpenAIServing::limits() const {
  ProtocolLimits l;
  l.model_names = {config_.model_name};
  l.max_n = config_.max_n;
  l.max_json_depth = config_.max_json_depth;
  l.max_prompts = config_.max_prompts;
  return l;
}

std::string OpenAIServing::NewId(const char* prefix) {
  std::lock_guard<std::mutex> lock(rng_mu_);
  static const char* kHex = "0123456789abcdef";
  std::string id = prefix;
  uint64_t a = rng_(), b = rng_();
  for (int i = 0; i < 16; ++i) id += kHex[(a >> (4 * i)) & 15];
  for (int i = 0; i < 8; ++i) id += kHex[(b >> (4 * i)) & 15];
  return id;
}

json OpenAIServing::ModelsJson() const {
  return json{{"object", "list"},
              {"data", json::array({json{{"id", config_.model_name},
                                         {"object", "model"},
                                         {"created", 0},
                                         {"owned_by", "moestream"},
                                         {"max_model_len", config_.max_context}}})}};
}

std::optional<ApiError> OpenAIServing::Admit(PreparedRequest* req, const std::string& key) {
  const std::string pparam = req->chat ? "messages" : "prompt";
  int64_t longest = 0;
  for (size_t k = 0; k < req->prompts.size(); ++k) {
    const std::vector<int32_t>& prompt = req->prompts[k];
    const std::string param = req->prompts.size() > 1 ? absl::StrCat("prompt[", k, "]") : pparam;
    const int64_t n = static_cast<int64_t>(prompt.size());
    if (n == 0) return BadRequest("the prompt is empty", param);
    for (int32_t id : prompt) {
      if (id < 0 || id >= codec_->vocab_size()) {
        return BadRequest(absl::StrCat("token id ", id, " is outside the vocabulary (0..", codec_->vocab_size() - 1, ")"),
                          param);
      }
    }
    if (n >= config_.max_context) {
      return BadRequest(absl::StrCat("This model's maximum context length is ", config_.max_context,
                                     " tokens, but the prompt has ", n, " tokens; the prompt is never truncated"),
                        param, "context_length_exceeded");
    }
    if (req->common.max_tokens > 0 && n + req->common.max_tokens > config_.max_context) {
      return BadRequest(absl::StrCat("This model's maximum context length is ", config_.max_context,
                                     " tokens; the prompt has ", n, " tokens and max_tokens asks for ",
                                     req->common.max_tokens, " more (", n + req->common.max_tokens, " in all)"),
                        "max_tokens", "context_length_exceeded");
    }
    longest = std::max(longest, n);
  }
  req->max_tokens = req->common.max_tokens > 0 ? req->common.max_tokens
                                               : static_cast<int32_t>(config_.max_context - longest);
  if (req->common.min_tokens > req->max_tokens) {
    return BadRequest(absl::StrCat("'min_tokens' (", req->common.min_tokens, ") exceeds the tokens this request can "
                                   "generate (", req->max_tokens, ")"),
                      "min_tokens");
  }
  for (size_t k = 0; k < req->common.stop_token_ids.size(); ++k) {
    const int32_t id = req->common.stop_token_ids[k];
    if (id >= codec_->vocab_size()) {
      return BadRequest(absl::StrCat("stop token id ", id, " is outside the vocabulary (0..", codec_->vocab_size() - 1,
                                     ")"),
                        absl::StrCat("stop_token_ids[", k, "]"));
    }
  }
  for (const auto& [id, bias] : req->common.logit_bias) {
    if (id >= codec_->vocab_size()) {
      return BadRequest(absl::StrCat("logit_bias token id ", id, " is outside the vocabulary (0..",
                                     codec_->vocab_size() - 1, ")"),
                        absl::StrCat("logit_bias.", id));
    }
  }
  if (!req->common.ignore_eos) req->stop_ids = codec_->StopTokenIds();
  for (int32_t id : req->common.stop_token_ids) {
    if (std::find(req->stop_ids.begin(), req->stop_ids.end(), id) == req->stop_ids.end()) req->stop_ids.push_back(id);
  }
  if (auto e = BuildConstraint(req->common, req->chat ? &req->chat_request : nullptr, req->opens_reasoning, *codec_,
                               config_.structured, &req->constraint)) {
    return e;
  }
  if (!req->constraint.json.empty() && req->stop_ids.empty()) {
    return BadRequest("a structured output needs a stop token to end on; this request has none (stop_token_ids)",
                      "stop_token_ids");
  }
  req->start = Clock::now();
  req->meta.created = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  req->meta.model = config_.model_name;
  req->meta.id = NewId(req->chat ? "chatcmpl-" : "cmpl-");
  auto admitted = admission_->Admit(key);
  if (auto* e = std::get_if<ApiError>(&admitted)) return *e;
  req->ticket = std::move(std::get<std::unique_ptr<AdmissionController::Ticket>>(admitted));
  return std::nullopt;
}

std::variant<std::unique_ptr<PreparedRequest>, ApiError> OpenAIServing::PrepareChat(std::string_view body,
                                                                                    const std::string& key) {
  auto req = std::make_unique<PreparedRequest>();
  req->chat = true;
  if (auto e = ParseChatRequest(body, limits(), &req->chat_request)) return *e;
  req->common = req->chat_request.common;
  auto ids = codec_->EncodeChat(req->chat_request);
  if (!ids.ok()) return FromStatus(ids.status());
  req->prompts.push_back(std::move(ids->ids));
  req->opens_reasoning = ids->opens_reasoning;
  if (auto e = Admit(req.get(), key)) return *e;
  return req;
}

std::variant<std::unique_ptr<PreparedRequest>, ApiError> OpenAIServing::PrepareCompletion(std::string_view body,
                                                                                          const std::string& key) {
  auto req = std::make_unique<PreparedRequest>();
  req->chat = false;
  if (auto e = ParseCompletionRequest(body, limits(), &req->completion_request)) return *e;
  req->common = req->completion_request.common;
  for (const auto& p : req->completion_request.prompts) {
    if (p.is_tokens) {
      req->prompts.push_back(p.tokens);
    } else {
      auto ids = codec_->Encode(p.text);
      if (!ids.ok()) return FromStatus(ids.status());
      req->prompts.push_back(std::move(*ids));
    }
    if (req->completion_request.echo) {
      std::string text;
      if (p.is_tokens) {
        for (int32_t id : p.tokens) text += codec_->TokenBytes(id);
      } else {
        text = p.text;
      }
      req->echo.push_back(std::move(text));
    }
  }
  if (auto e = Admit(req.get(), key)) return *e;
  return req;
}

// ---- generation ------------------------------------------------------------------

struct OpenAIServing::Sink {
  virtual ~Sink() = default;
  // A piece of choice `index` (parsed delta + logprob entries of its tokens).
  virtual bool Delta(int index, const OutputParser::Delta& d, std::vector<LogprobEntry>* lps) = 0;
  virtual bool Finish(int index, const std::string& reason) = 0;
  // Called while nothing arrives (every poll): a stream writes a keep-alive when due.
  virtual bool Idle() { return true; }
};

namespace {

struct EventQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<int, SeqEvent>> events;
  void Push(int i, SeqEvent ev) {
    {
      std::lock_guard<std::mutex> lock(mu);
      events.emplace_back(i, std::move(ev));
    }
    cv.notify_one();
  }
  bool Pop(std::pair<int, SeqEvent>* out, std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, wait, [&] { return !events.empty(); })) return false;
    *out = std::move(events.front());
    events.pop_front();
    return true;
  }
};

struct ChoiceState {
  Utf8Assembler utf8;
  std::unique_ptr<StopMatcher> stop;
  std::unique_ptr<OutputParser> parser;
  bool done = false;
  bool tool_calls = false;
  int32_t tokens = 0;
  Clock::time_point last_token;
};

void Merge(OutputParser::Delta* into, OutputParser::Delta d) {
  into->content += d.content;
  into->reasoning += d.reasoning;
  for (auto& c : d.tool_calls) into->tool_calls.push_back(std::move(c));
}

}  // namespace

void OpenAIServing::AbortAll(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(abort_mu_);
    abort_why_ = why;
  }
  aborted_.store(true);
}

std::optional<ApiError> OpenAIServing::Generate(PreparedRequest& req, ClientStream* io, Sink* sink, Usage* usage) {
  const auto deadline = config_.generation_timeout.count() > 0 ? req.start + config_.generation_timeout
                                                               : Clock::time_point::max();
  // Why the request must end now other than its client leaving, or nullopt.
  auto ended = [&]() -> std::optional<ApiError> {
    if (aborted_.load()) {
      std::lock_guard<std::mutex> lock(abort_mu_);
      return FromStatus(absl::UnavailableError(abort_why_));
    }
    if (Clock::now() >= deadline) {
      ApiError e;
      e.http_status = 504;
      e.type = "server_error";
      e.code = "generation_timeout";
      e.message = absl::StrCat("the request ran longer than ", config_.generation_timeout.count() / 1000.0,
                               " s (--generation-timeout-s)");
      return e;
    }
    return std::nullopt;
  };
  std::optional<ApiError> error;
  auto gone = [&] {
    if (!error) error = ended();
    return error.has_value() || !sink->Idle() || io->Gone();
  };
  if (!req.ticket->WaitRunning(gone, config_.poll)) {
    if (error) return error;
    metrics_->AddCancelled();
    return FromStatus(absl::CancelledError("client disconnected while queued"));
  }
  const int per_prompt = req.common.n;
  const int n = per_prompt * static_cast<int>(req.prompts.size());
  const std::vector<int32_t>& stop_ids = req.stop_ids;
  auto q = std::make_shared<EventQueue>();
  std::vector<ChoiceState> choices(n);
  std::vector<std::unique_ptr<SeqHandle>> handles(n);
  auto cancel_all = [&] {
    for (auto& h : handles) {
      if (h) h->Cancel();
    }
  };
  for (int i = 0; i < n; ++i) {
    if (req.common.min_tokens == 0) choices[i].stop = std::make_unique<StopMatcher>(req.common.stop);
    if (req.constraint.verbatim_body) {
      choices[i].parser = NewConstrainedOutputParser(req.opens_reasoning, req.constraint.reasoning_end);
    } else {
      choices[i].parser = req.chat ? codec_->NewChatParser(req.chat_request, req.opens_reasoning)
                                   : std::make_unique<PlainOutputParser>();
    }
    GenerateParams p;
    p.request_id = absl::StrCat(req.meta.id, "-", i);
    p.prompt = req.prompts[i / per_prompt];
    p.max_tokens = req.max_tokens;
    p.sampling = req.common.sampling;
    if (p.sampling.has_seed) p.sampling.seed += static_cast<uint64_t>(i % per_prompt);  // derived per choice
    p.logprobs = req.common.logprobs;
    p.stop_token_ids = stop_ids;
    p.min_tokens = req.common.min_tokens;
    p.logit_bias = req.common.logit_bias;
    if (!req.constraint.json.empty()) {
      p.constraint = req.constraint.json;
      p.vocab_fingerprint = vocab_fingerprint_;
    }
    handles[i] = placer_->Start(std::move(p), [q, i](SeqEvent ev) { q->Push(i, std::move(ev)); });
  }
  for (int i = 0; i < n && !req.echo.empty(); ++i) {
    OutputParser::Delta d;
    d.content = req.echo[i / per_prompt];
    if (!sink->Delta(i, d, nullptr)) {
      cancel_all();
      handles.clear();
      return FromStatus(absl::CancelledError("client disconnected"));
    }
  }

  for (const auto& p : req.prompts) usage->prompt_tokens += static_cast<int32_t>(p.size());
  int remaining = n;
  bool first_token = true;
  auto finish_choice = [&](int i, std::string reason, OutputParser::Delta tail) -> bool {
    ChoiceState& cs = choices[i];
    Merge(&tail, cs.parser->Finish());
    if (!tail.tool_calls.empty()) cs.tool_calls = true;
    cs.done = true;
    --remaining;
    usage->completion_tokens += cs.tokens;
    if (cs.tool_calls && reason == "stop") reason = "tool_calls";
    req.finish_reasons.push_back(reason);
    metrics_->AddFinish(reason);
    bool ok = true;
    if (!tail.empty()) ok = sink->Delta(i, tail, nullptr);
    return sink->Finish(i, reason) && ok;
  };

  while (remaining > 0) {
    std::pair<int, SeqEvent> item;
    if (!q->Pop(&item, config_.poll)) {
      if (gone()) {
        if (!error) error = FromStatus(absl::CancelledError("client disconnected"));
        break;
      }
      continue;
    }
    const int i = item.first;
    SeqEvent& ev = item.second;
    ChoiceState& cs = choices[i];
    if (cs.done) continue;  // late events of a choice we already ended (stop string)
    if (ev.kind == SeqEvent::kToken) {
      auto now = Clock::now();
      if (first_token) {
        req.ttft_s = std::chrono::duration<double>(now - req.start).count();
        metrics_->ObserveTtft(req.ttft_s);
        first_token = false;
      } else if (cs.tokens > 0) {
        metrics_->ObserveItl(std::chrono::duration<double>(now - cs.last_token).count());
      }
      cs.last_token = now;
      ++cs.tokens;
      metrics_->AddTokens(1);
      std::vector<LogprobEntry> lps;
      if (req.common.logprobs >= 0) {
        LogprobEntry e;
        e.token = codec_->TokenBytes(ev.token);
        e.logprob = ev.logprob;
        for (const auto& t : ev.top) e.top.emplace_back(codec_->TokenBytes(t.id), t.logprob);
        lps.push_back(std::move(e));
      }
      bool is_stop_token = std::find(stop_ids.begin(), stop_ids.end(), ev.token) != stop_ids.end();
      std::string text = is_stop_token ? cs.utf8.Flush()
                                       : cs.utf8.Push(req.common.skip_special_tokens
                                                          ? codec_->TokenBytes(ev.token)
                                                          : codec_->TokenBytesWithSpecial(ev.token));
      StopMatcher::Result r;
      if (cs.stop) {
        r = cs.stop->Push(text);
        if (r.stopped && req.common.include_stop_str_in_output) r.emit += r.matched;
      } else {
        r.emit = std::move(text);  // before min_tokens: stop strings do not end it yet
        if (cs.tokens >= req.common.min_tokens) cs.stop = std::make_unique<StopMatcher>(req.common.stop);
      }
      OutputParser::Delta d = cs.parser->Push(r.emit);
      if (!d.tool_calls.empty()) cs.tool_calls = true;
      bool ok = true;
      if (!d.empty() || !lps.empty()) ok = sink->Delta(i, d, req.common.logprobs >= 0 ? &lps : nullptr);
      if (r.stopped) {
        handles[i]->Cancel();
        metrics_->AddCancelled();
        ok = finish_choice(i, "stop", {}) && ok;
      }
      if (!ok) {
        error = FromStatus(absl::CancelledError("client disconnected"));
        break;
      }
    } else if (ev.kind == SeqEvent::kFinish) {
      if (ev.finish == FinishReason::kCancelled) {
        error = FromStatus(absl::UnavailableError("the worker cancelled the sequence (shutting down?)"));
        break;
      }
      usage->cached_tokens = std::max(usage->cached_tokens, ev.cached_prompt_tokens);
      usage->accepted_prediction_tokens += ev.accepted_prediction_tokens;
      usage->rejected_prediction_tokens += ev.rejected_prediction_tokens;
      std::string text = cs.utf8.Flush();
      if (!cs.stop) cs.stop = std::make_unique<StopMatcher>(std::vector<std::string>{});
      StopMatcher::Result r = cs.stop->Push(text);
      if (r.stopped && req.common.include_stop_str_in_output) r.emit += r.matched;
      std::string tail = r.emit + (r.stopped ? "" : cs.stop->Flush());
      OutputParser::Delta d = cs.parser->Push(tail);
      std::string reason = r.stopped ? "stop" : FinishReasonName(ev.finish);
      if (ev.completion_tokens > cs.tokens) cs.tokens = ev.completion_tokens;
      if (!finish_choice(i, reason, std::move(d))) {
        error = FromStatus(absl::CancelledError("client disconnected"));
        break;
      }
    } else {
      error = FromStatus(ev.status);
      MOE_LOG(WARNING) << req.meta.id << " choice " << i << ": " << ev.status.ToString();
      break;
    }
  }
  if (error) {
    cancel_all();
    if (error->code == "cancelled") metrics_->AddCancelled();
  }
  handles.clear();  // joins: no event after this
  req.usage = *usage;
  metrics_->AddPromptTokens(usage->prompt_tokens);
  if (error && error->code != "cancelled") {
    for (int i = 0; i < n; ++i) {
      if (!choices[i].done) metrics_->AddFinish(error->code.empty() ? "error" : error->code);
    }
  }
  return error;
}

HttpReply OpenAIServing::RunUnary(PreparedRequest& req, ClientStream* io) {
  struct Collect final : Sink {
    std::vector<ChoiceResult> choices;
    bool Delta(int i, const OutputParser::Delta& d, std::vector<LogprobEntry>* lps) override {
      ChoiceResult& c = choices[i];
      c.text += d.content;
      c.reasoning += d.reasoning;
      for (const auto& t : d.tool_calls) {
        if (c.tool_calls.is_null()) c.tool_calls = json::array();
        c.tool_calls.push_back(t);
      }
      if (lps) {
        c.has_logprobs = true;
        for (auto& e : *lps) c.logprobs.push_back(std::move(e));
      }
      return true;
    }
    bool Finish(int i, const std::string& reason) override {
      choices[i].finish_reason = reason;
      return true;
    }
  } collect;
  const int total = req.common.n * static_cast<int>(req.prompts.size());
  collect.choices.resize(total);
  for (int i = 0; i < total; ++i) {
    collect.choices[i].index = i;
    collect.choices[i].has_logprobs = req.common.logprobs >= 0;
  }
  Usage usage;
  if (auto e = Generate(req, io, &collect, &usage)) return ErrorReply(*e);
  HttpReply r;
  r.body = DumpJson(req.chat ? ChatCompletionJson(req.meta, collect.choices, usage)
                            : CompletionJson(req.meta, collect.choices, usage));
  return r;
}

OpenAIServing::StreamOutcome OpenAIServing::RunStream(PreparedRequest& req, ClientStream* io) {
  struct Stream final : Sink {
    PreparedRequest* req = nullptr;
    ClientStream* io = nullptr;
    std::chrono::milliseconds keepalive{0};
    Clock::time_point last_write = Clock::now();
    bool wrote = false;
    std::vector<bool> role_sent;
    std::vector<size_t> text_offset;
    bool Write(const std::string& frame) {
      wrote = true;
      last_write = Clock::now();
      return io->Write(frame);
    }
    bool Idle() override {
      if (keepalive.count() <= 0 || Clock::now() - last_write < keepalive) return true;
      return Write(SseComment("keep-alive"));
    }
    bool Delta(int i, const OutputParser::Delta& d, std::vector<LogprobEntry>* lps) override {
      const bool iu = req->common.include_usage;
      std::string out;
      if (req->chat) {
        json delta = json::object();
        if (!role_sent[i]) {
          delta["role"] = "assistant";
          role_sent[i] = true;
        }
        if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;  // + "reasoning" (ChatChunkJson)
        if (!d.content.empty() || (d.reasoning.empty() && d.tool_calls.empty())) delta["content"] = d.content;
        if (!d.tool_calls.empty()) delta["tool_calls"] = d.tool_calls;
        out = SseData(ChatChunkJson(req->meta, i, delta, lps, "", iu));
      } else {
        out = SseData(CompletionChunkJson(req->meta, i, d.content, lps, text_offset[i], "", iu));
        text_offset[i] += d.content.size();
      }
      return Write(out);
    }
    bool Finish(int i, const std::string& reason) override {
      const bool iu = req->common.include_usage;
      if (req->chat) {
        json delta = json::object();
        if (!role_sent[i]) {
          delta["role"] = "assistant";
          delta["content"] = "";
          role_sent[i] = true;
        }
        return Write(SseData(ChatChunkJson(req->meta, i, delta, nullptr, reason, iu)));
      }
      return Write(SseData(CompletionChunkJson(req->meta, i, "", nullptr, text_offset[i], reason, iu)));
    }
  } stream;
  stream.req = &req;
  stream.io = io;
  stream.keepalive = config_.sse_keepalive;
  const int total = req.common.n * static_cast<int>(req.prompts.size());
  stream.role_sent.assign(total, false);
  stream.text_offset.assign(total, 0);
  Usage usage;
  if (auto e = Generate(req, io, &stream, &usage)) {
    if (!stream.wrote && e->code != "cancelled") return {e->http_status, *e};
    if (e->code != "cancelled") {
      io->Write(SseData(e->ToJson()));
      io->Write(SseDone());
    }
    return {e->http_status, std::nullopt};
  }
  if (req.common.include_usage) io->Write(SseData(UsageChunkJson(req.meta, req.chat, usage)));
  io->Write(SseDone());
  return {200, std::nullopt};
}

}  // namespace moe::gateway
