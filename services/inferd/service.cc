#include "services/inferd/service.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <iostream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/base/service_main.h"
#include "common/sampling/sampler.h"
#include "common/base/log.h"
#include "common/base/status.h"

namespace moe::inferd {

namespace {

grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

// Bounds on what one Generate may ask for (the gateway asks for at most 20 / a handful).
constexpr int32_t kMaxTopLogprobs = 20;
constexpr size_t kMaxStopTokenIds = 1024;

struct CallQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<SeqOutput> outs;
};

}  // namespace

grpc::Status InferdService::Generate(grpc::ServerContext* ctx, const GenerateRequest* req,
                                     grpc::ServerWriter<GenerateEvent>* writer) {
  SeqRequest r;
  r.id = req->request_id().empty() ? absl::StrCat("anon-", next_id_++) : req->request_id();
  r.prompt.assign(req->prompt().begin(), req->prompt().end());
  r.max_tokens = req->max_tokens();
  const auto& sp = req->sampling();
  r.sampling.temperature = sp.temperature();
  r.sampling.top_p = sp.top_p() <= 0.0f ? 1.0f : sp.top_p();
  r.sampling.top_k = sp.top_k();
  r.sampling.min_p = sp.min_p();
  r.sampling.presence_penalty = sp.presence_penalty();
  r.sampling.frequency_penalty = sp.frequency_penalty();
  r.sampling.repetition_penalty = sp.repetition_penalty() == 0.0f ? 1.0f : sp.repetition_penalty();
  r.has_seed = sp.has_seed();
  r.seed = sp.seed();
  r.logprobs = req->logprobs();
  r.stop_token_ids.assign(req->stop_token_ids().begin(), req->stop_token_ids().end());
  r.min_tokens = req->min_tokens();
  for (const auto& b : req->logit_bias()) r.logit_bias.emplace_back(b.token(), b.bias());
  if (absl::Status bad = CheckSampleParams(r.sampling); !bad.ok()) {
    return Refuse(grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("sampling parameters out of range: ", bad.message()));
  }
  if (!req->constraint().empty()) {
    if (!compiler_) {
      return Refuse(grpc::StatusCode::FAILED_PRECONDITION,
                    absl::StrCat("structured outputs are unavailable on this worker: ", vocab_note_));
    }
    if (req->vocab_fingerprint() != compiler_->fingerprint()) {
      return Refuse(grpc::StatusCode::FAILED_PRECONDITION,
                    absl::StrCat("structured outputs: the sender's vocabulary (fingerprint ", req->vocab_fingerprint(),
                                 ") is not this worker's (", compiler_->fingerprint(), ", ", vocab_note_,
                                 "): give the worker the gateway's tokenizer (--tokenizer)"));
    }
    auto spec = structured::ConstraintSpecFromJson(req->constraint());
    if (!spec.ok()) return Refuse(grpc::StatusCode::INVALID_ARGUMENT, std::string(spec.status().message()));
    // Compiled here, on the call's thread: a new schema never stalls the batch.
    structured::CompileInfo info;
    auto c = compiler_->NewConstraint(*spec, r.stop_token_ids, &info);
    if (!c.ok()) return Refuse(grpc::StatusCode::INVALID_ARGUMENT, std::string(c.status().message()));
    compile_us_ += static_cast<int64_t>(info.compile_ms * 1000);
    r.constraint = std::move(*c);
  }
  if (r.logprobs > kMaxTopLogprobs) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("logprobs ", r.logprobs, " > ", kMaxTopLogprobs, " alternatives per token"));
  }
  if (r.stop_token_ids.size() > kMaxStopTokenIds) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat(r.stop_token_ids.size(), " stop token ids; at most ", kMaxStopTokenIds));
  }
  const std::string id = r.id;
  auto q = std::make_shared<CallQueue>();
  absl::Status st = batcher_->Submit(std::move(r), [q](SeqOutput o) {
    {
      std::lock_guard<std::mutex> lock(q->mu);
      q->outs.push_back(std::move(o));
    }
    q->cv.notify_one();
  });
  if (!st.ok()) return Refuse(static_cast<grpc::StatusCode>(st.code()), std::string(st.message()));
  bool cancel_sent = false;
  while (true) {
    std::deque<SeqOutput> got;
    {
      std::unique_lock<std::mutex> lock(q->mu);
      q->cv.wait_for(lock, std::chrono::milliseconds(2), [&] { return !q->outs.empty(); });
      got.swap(q->outs);
    }
    if (!cancel_sent && ctx->IsCancelled()) {
      batcher_->Cancel(id);
      cancel_sent = true;
    }
    if (got.empty()) continue;
    GenerateEvent ev;
    const SeqOutput* fin = nullptr;
    for (const auto& o : got) {
      for (const auto& t : o.tokens) {
        Token* tok = ev.add_tokens();
        tok->set_id(t.token);
        tok->set_logprob(t.logprob);
        for (const auto& [id2, lp] : t.top) {
          TopLogprob* tl = tok->add_top();
          tl->set_token(id2);
          tl->set_logprob(lp);
        }
      }
      if (o.finished) fin = &o;
    }
    if (fin) {
      if (fin->reason == EndReason::kError) return ToGrpc(fin->error);
      auto* f = ev.mutable_finish();
      f->set_reason(fin->reason == EndReason::kStop     ? ::moe::inferd::Finish::STOP
                    : fin->reason == EndReason::kLength ? ::moe::inferd::Finish::LENGTH
                                                     : ::moe::inferd::Finish::CANCELLED);
      f->set_prompt_tokens(fin->prompt_tokens);
      f->set_completion_tokens(fin->completion_tokens);
      f->set_cached_prompt_tokens(fin->cached_prompt_tokens);
      f->set_accepted_prediction_tokens(fin->accepted_prediction_tokens);
      f->set_rejected_prediction_tokens(fin->rejected_prediction_tokens);
      if (!cancel_sent || !ctx->IsCancelled()) writer->Write(ev);
      return grpc::Status::OK;
    }
    if (!cancel_sent && !writer->Write(ev)) {
      batcher_->Cancel(id);
      cancel_sent = true;
    }
  }
}

grpc::Status InferdService::Refuse(grpc::StatusCode code, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    last_refusal_ = why;
  }
  return grpc::Status(code, why);
}

grpc::Status InferdService::Cancel(grpc::ServerContext*, const CancelRequest* req, CancelReply* reply) {
  reply->set_found(batcher_->Cancel(req->request_id()));
  return grpc::Status::OK;
}

grpc::Status InferdService::Health(grpc::ServerContext*, const HealthRequest*, HealthReply* reply) {
  // A worker whose steps cannot run (expertd gone) is not healthy, whatever else is: the
  // gateway takes it out of rotation and /health says why.
  if (absl::Status h = model_->Health(); !h.ok()) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, absl::StrCat("inferd cannot run steps: ", h.message()));
  }
  auto s = batcher_->stats();
  reply->set_model(model_->name());
  reply->set_max_context(model_->max_context());
  reply->set_vocab_size(model_->vocab_size());
  reply->set_active_sequences(s.active);
  reply->set_max_sequences(batcher_->config().max_sequences);
  reply->set_vocab_fingerprint(compiler_ ? compiler_->fingerprint() : 0);
  reply->set_constraint_vocab(vocab_note_);
  return grpc::Status::OK;
}

grpc::Status InferdService::Stats(grpc::ServerContext*, const StatsRequest*, StatsReply* reply) {
  auto s = batcher_->stats();
  reply->set_steps(s.steps);
  reply->set_decode_tokens(s.decode_tokens);
  reply->set_prefill_tokens(s.prefill_tokens);
  reply->set_tokens_per_second(s.tokens_per_second);
  reply->set_active_sequences(s.active);
  reply->set_waiting_sequences(s.waiting);
  reply->set_prefix_cache_hit_tokens(s.prefix_hit_tokens);
  reply->set_prefix_cache_lookups(s.prefix_lookups);
  reply->set_cancelled(s.cancelled);
  reply->set_max_steps_after_cancel(s.max_steps_after_cancel);
  reply->set_expert_hit_rate(std::max(0.0, model_->expert_hit_rate()));
  reply->set_max_batch_rows(s.max_batch_rows);
  reply->set_expert_fetches(s.expert_fetches);
  reply->set_last_step_expert_fetches(s.last_step_expert_fetches);
  reply->set_kv_bytes(s.kv_bytes);
  reply->set_prefix_cache_bytes(s.prefix_cache_bytes);
  reply->set_prefix_cache_capacity_bytes(batcher_->config().prefix_cache_bytes);
  reply->set_prefix_cache_entries(s.prefix_cache_entries);
  reply->set_constrained_sequences(s.constrained);
  reply->set_constraint_compile_ms(static_cast<double>(compile_us_.load()) / 1000.0);
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    reply->set_last_error(!s.last_error.empty() ? s.last_error : last_refusal_);
  }
  reply->set_errors(s.errors);
  reply->set_prefix_disk_hit_tokens(s.prefix.disk_hit_tokens);
  reply->set_prefix_disk_hits(s.prefix.disk_hits);
  reply->set_prefix_disk_bytes(s.prefix.disk.bytes);
  reply->set_prefix_disk_capacity_bytes(s.prefix.disk.max_bytes);
  reply->set_prefix_disk_files(s.prefix.disk.files);
  reply->set_prefix_disk_writes(s.prefix.disk.writes);
  reply->set_prefix_disk_ignored(s.prefix.disk.ignored);
  reply->set_prefix_disk_spills_dropped(s.prefix.spills_dropped);
  {
    const SequenceModel::PeerCounters p = model_->peer_counters();
    reply->set_peer_remote_jobs(p.remote_jobs);
    reply->set_peer_fallback_jobs(p.fallback_jobs);
    reply->set_peer_failed_calls(p.failed_calls);
    reply->set_peer_bytes_sent(p.bytes_sent);
    reply->set_peer_bytes_received(p.bytes_received);
    reply->set_peer_served_jobs(p.served_jobs);
    reply->set_peer_refused_calls(p.refused_calls);
  }
  reply->set_spec_decode_steps(s.spec.steps);
  reply->set_spec_decode_tokens(s.spec.tokens);
  reply->set_spec_drafted(s.spec.drafted);
  reply->set_spec_accepted(s.spec.accepted);
  for (int64_t v : s.spec.drafted_at) reply->add_spec_drafted_per_position(v);
  for (int64_t v : s.spec.accepted_at) reply->add_spec_accepted_per_position(v);
  reply->set_speculative(std::string(SpecModeName(batcher_->config().spec.mode)));
  reply->set_spec_plain_step_us(static_cast<int64_t>(s.spec_plain_step_seconds * 1e6));
  reply->set_spec_plain_step_tokens(s.spec_plain_step_tokens);
  reply->set_spec_verify_step_us(static_cast<int64_t>(s.spec_verify_step_seconds * 1e6));
  reply->set_spec_verify_step_tokens(s.spec_verify_step_tokens);
  reply->set_spec_guard_blocks(s.spec_guard_blocks);
  reply->set_prefill_passes(s.prefill_passes);
  reply->set_prefill_pass_rows(s.prefill_pass_rows);
  reply->set_prefill_pass_aborts(s.prefill_pass_aborts);
  reply->set_prefill_pass_capacity_rows(batcher_->passes_on() ? batcher_->config().prefill_pass_rows : 0);
  reply->set_prefill_max_slice_seconds(s.max_pass_slice_seconds);
  return grpc::Status::OK;
}

int RunInferd(int argc, char** argv, ModelFactory& factory) {
  sigset_t sigs = BlockStopSignals();

  std::string listen = "unix:/tmp/moestream-inferd.sock";
  int64_t max_sequences = 64, max_step_tokens = 512, prefill_chunk = 128;
  uint64_t prefix_cache_bytes = uint64_t{1} << 30;
  std::string prefix_cache_dir;
  uint64_t prefix_cache_disk_bytes = uint64_t{16} << 30;
  std::string tokenizer, speculative = "auto";  // the served default (docs/SERVING.md "Speculative decoding")
  int64_t draft_tokens = 3;
  int64_t prefill_pass_bytes = -1;
  double prefill_slice_ms = 50;
  FlagSet flags("inferd", "Inference worker: continuous batching over one model, served over gRPC.");
  flags.AddString("listen", &listen, "unix:/path or HOST:PORT (TCP binds only what is named)");
  flags.AddInt("max-sequences", &max_sequences, "live sequences at most (more: RESOURCE_EXHAUSTED)");
  flags.AddInt("max-step-tokens", &max_step_tokens, "tokens fed per step (decode rows + prefill chunks)");
  flags.AddInt("prefill-chunk", &prefill_chunk,
               "largest prompt chunk per sequence per step; longer prompts go in layer-major passes "
               "(--prefill-pass-bytes)");
  flags.AddInt("prefill-pass-bytes", &prefill_pass_bytes,
               "activation bytes of one layer-major prefill pass (planned prefill, docs/SERVING.md): -1 = the "
               "serving plan's, else the model's default (512 MiB for the engine); 0 = no passes (every prompt in --prefill-chunk chunks)");
  flags.AddDouble("prefill-slice-ms", &prefill_slice_ms,
                  "longest a prefill pass runs before the other sequences' next step (the latency it adds)");
  flags.AddBytes("prefix-cache-bytes", &prefix_cache_bytes, "KV of finished sequences kept for prefix reuse");
  flags.AddString("prefix-cache-dir", &prefix_cache_dir,
                  "directory of the prefix cache's disk tier: finished sequences' KV, reused by every worker of the "
                  "same model on the host and after restarts (empty: RAM only)");
  flags.AddBytes("prefix-cache-disk-bytes", &prefix_cache_disk_bytes,
                 "bytes the --prefix-cache-dir files may take (least recently used removed first)");
  flags.AddString("tokenizer", &tokenizer,
                  "vocabulary for structured outputs: a directory with tokenizer.json (the gateway's), 'none', or "
                  "empty = the model's own when it has one");
  flags.AddString("speculative", &speculative,
                  "speculative decoding: auto (lookup or MTP, the depth per step from measured acceptance and step "
                  "cost, a drafter that does not pay is stopped), off, mtp (the model's MTP layer drafts) or ngram "
                  "(prompt lookup); the tokens never change (docs/SERVING.md)");
  flags.AddInt("draft-tokens", &draft_tokens, "most drafts per sequence and step (K, 1..8)");
  factory.AddFlags(flags);
  if (auto code = ParseServiceFlags("inferd", flags, argc, argv)) return *code;
  SpecOptions spec;
  if (auto m = ParseSpecMode(speculative); !m.ok()) {
    std::cerr << "inferd: " << m.status().message() << "\n";
    return 2;
  } else {
    spec = SpecOptions{*m, static_cast<int>(std::clamp<int64_t>(draft_tokens, -1, 1000))};
  }
  if (absl::Status st = CheckSpecOptions(spec); !st.ok()) {
    std::cerr << "inferd: " << st.message() << "\n";
    return 2;
  }
  if (max_sequences < 1 || max_step_tokens < 1 || prefill_chunk < 1) {
    std::cerr << "inferd: --max-sequences, --max-step-tokens, --prefill-chunk must be >= 1\n";
    return 2;
  }
  if (prefill_pass_bytes < -1 || !(prefill_slice_ms >= 0)) {
    std::cerr << "inferd: --prefill-pass-bytes must be -1, 0 or a byte count; --prefill-slice-ms >= 0\n";
    return 2;
  }
  auto model = factory.Create();
  if (!model.ok()) {
    std::cerr << "inferd: " << model.status().message() << "\n";
    return 1;
  }
  if (spec.mode == SpecMode::kMtp || spec.mode == SpecMode::kAuto) {
    // mtp needs the layer; auto drafts by prompt lookup alone without it.
    if (absl::Status st = (*model)->set_mtp_drafts(true); !st.ok()) {
      if (spec.mode == SpecMode::kMtp) {
        std::cerr << "inferd: --speculative mtp: " << st.message() << "\n";
        return 1;
      }
      MOE_LOG(INFO) << "inferd: --speculative auto without MTP drafts: " << st.message();
    }
  }
  BatcherConfig bc;
  bc.spec = spec;
  bc.max_sequences = static_cast<int>(max_sequences);
  bc.max_step_tokens = max_step_tokens;
  bc.prefill_chunk = prefill_chunk;
  {
    int64_t pass_bytes = prefill_pass_bytes;
    if (pass_bytes < 0) pass_bytes = (*model)->default_pass_bytes();
    bc.prefill_pass_rows = pass_bytes > 0 ? (*model)->pass_rows_for_bytes(pass_bytes) : 0;
    bc.prefill_slice_seconds = prefill_slice_ms / 1000.0;
    MOE_LOG(INFO) << "inferd: prefill: "
                  << (bc.prefill_pass_rows > 0
                          ? absl::StrCat("layer-major passes of up to ", bc.prefill_pass_rows, " prompt rows (",
                                         pass_bytes, " B of activations), ", prefill_slice_ms, " ms slices")
                          : absl::StrCat("chunks of ", prefill_chunk, " tokens"));
  }
  bc.prefix_cache_bytes = static_cast<int64_t>(prefix_cache_bytes);
  if (!prefix_cache_dir.empty()) {
    auto tier = [&]() -> absl::StatusOr<std::unique_ptr<PrefixDiskTier>> {
      MOE_ASSIGN_OR_RETURN(std::string identity, (*model)->StateIdentity());
      return PrefixDiskTier::Open(prefix_cache_dir, static_cast<int64_t>(prefix_cache_disk_bytes), identity);
    }();
    if (!tier.ok()) {
      std::cerr << "inferd: --prefix-cache-dir: " << tier.status().message() << "\n";
      return 1;
    }
    bc.prefix_disk = std::move(*tier);
    const PrefixDiskStats ds = bc.prefix_disk->stats();
    MOE_LOG(INFO) << "inferd: prefix cache disk tier " << prefix_cache_dir << ": " << ds.files
                  << " files of this model, " << ds.bytes << " of " << ds.max_bytes << " B used; model identity "
                  << bc.prefix_disk->identity();
  }
  Batcher batcher(model->get(), bc);
  std::unique_ptr<structured::ConstraintCompiler> compiler;
  std::string vocab_note;
  if (tokenizer == "none") {
    vocab_note = "--tokenizer none";
  } else if (auto vocab = factory.Vocabulary(tokenizer); !vocab.ok()) {
    if (!tokenizer.empty() || !absl::IsNotFound(vocab.status())) {
      std::cerr << "inferd: --tokenizer: " << vocab.status().message() << "\n";
      return 1;
    }
    vocab_note = std::string(vocab.status().message());
    MOE_LOG(INFO) << "inferd: structured outputs off: " << vocab_note;
  } else {
    auto c = structured::ConstraintCompiler::Create(vocab->texts, vocab->stop_ids, (*model)->vocab_size());
    if (!c.ok()) {
      std::cerr << "inferd: --tokenizer: " << c.status().message() << "\n";
      return 1;
    }
    compiler = std::move(*c);
    vocab_note = vocab->source;
    MOE_LOG(INFO) << "inferd: structured outputs over " << vocab->texts.size() << " token texts from " << vocab->source;
  }
  InferdService service(&batcher, model->get(), compiler.get(), vocab_note);
  if (listen.rfind("unix:", 0) == 0) ::unlink(listen.substr(5).c_str());
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(64 << 20);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) {
    std::cerr << "inferd: cannot listen on " << listen << "\n";
    return 1;
  }
  MOE_LOG(INFO) << "inferd: model " << (*model)->name() << " (context " << (*model)->max_context() << ", vocab "
                << (*model)->vocab_size() << ") serving on " << listen;
  int sig = 0;
  sigwait(&sigs, &sig);
  MOE_LOG(INFO) << "inferd: signal " << sig << ", shutting down";
  batcher.Shutdown();  // live sequences end as CANCELLED; streams return
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (listen.rfind("unix:", 0) == 0) ::unlink(listen.substr(5).c_str());
  MOE_LOG(INFO) << "inferd: stopped";
  return 0;
}

}  // namespace moe::inferd
