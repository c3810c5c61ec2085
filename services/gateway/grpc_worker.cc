#include "services/gateway/grpc_worker.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "common/base/status.h"
#include "proto/inferd.grpc.pb.h"

namespace moe::gateway {

namespace pb = ::moe::inferd;

struct GrpcWorker::Impl {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::InferD::Stub> stub;
};

namespace {

absl::Status FromGrpc(const grpc::Status& s) {
  auto code = static_cast<absl::StatusCode>(s.error_code());
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) code = absl::StatusCode::kUnavailable;
  return absl::Status(code, s.error_message());
}

class GrpcSeq final : public SeqHandle {
 public:
  GrpcSeq(std::shared_ptr<GrpcWorker::Impl> impl, GenerateParams p, SeqSink sink)
      : impl_(std::move(impl)), id_(p.request_id) {
    th_ = std::thread([this, p = std::move(p), sink = std::move(sink)] { Run(p, sink); });
  }
  ~GrpcSeq() override {
    Cancel();
    th_.join();
  }
  void Cancel() override {
    if (cancelled_.exchange(true)) return;
    // Explicit Cancel by id (async, fire and forget) + end the call.
    struct Call {
      grpc::ClientContext ctx;
      pb::CancelRequest req;
      pb::CancelReply reply;
    };
    auto call = std::make_shared<Call>();
    call->req.set_request_id(id_);
    call->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    impl_->stub->async()->Cancel(&call->ctx, &call->req, &call->reply, [call](grpc::Status) {});
    ctx_.TryCancel();
  }

 private:
  void Run(const GenerateParams& p, const SeqSink& sink) {
    pb::GenerateRequest req;
    req.set_request_id(p.request_id);
    req.mutable_prompt()->Assign(p.prompt.begin(), p.prompt.end());
    req.set_max_tokens(p.max_tokens);
    auto* s = req.mutable_sampling();
    s->set_temperature(p.sampling.temperature);
    s->set_top_p(p.sampling.top_p);
    s->set_top_k(p.sampling.top_k);
    s->set_min_p(p.sampling.min_p);
    s->set_presence_penalty(p.sampling.presence_penalty);
    s->set_frequency_penalty(p.sampling.frequency_penalty);
    s->set_has_seed(p.sampling.has_seed);
    s->set_seed(p.sampling.seed);
    s->set_repetition_penalty(p.sampling.repetition_penalty);
    req.set_logprobs(p.logprobs);
    req.mutable_stop_token_ids()->Assign(p.stop_token_ids.begin(), p.stop_token_ids.end());
    req.set_min_tokens(p.min_tokens);
    for (const auto& [tok, bias] : p.logit_bias) {
      auto* b = req.add_logit_bias();
      b->set_token(tok);
      b->set_bias(bias);
    }
    req.set_constraint(p.constraint);
    req.set_vocab_fingerprint(p.vocab_fingerprint);
    auto reader = impl_->stub->Generate(&ctx_, req);
    pb::GenerateEvent ev;
    bool finished = false;
    SeqEvent fin;
    fin.kind = SeqEvent::kFinish;
    while (reader->Read(&ev)) {
      for (const auto& t : ev.tokens()) {
        SeqEvent e;
        e.kind = SeqEvent::kToken;
        e.token = t.id();
        e.logprob = t.logprob();
        for (const auto& top : t.top()) e.top.push_back({top.token(), top.logprob()});
        sink(std::move(e));
      }
      if (ev.has_finish()) {
        finished = true;
        const auto& f = ev.finish();
        fin.finish = f.reason() == pb::Finish::STOP     ? FinishReason::kStop
                     : f.reason() == pb::Finish::LENGTH ? FinishReason::kLength
                                                        : FinishReason::kCancelled;
        fin.prompt_tokens = f.prompt_tokens();
        fin.completion_tokens = f.completion_tokens();
        fin.cached_prompt_tokens = f.cached_prompt_tokens();
        fin.accepted_prediction_tokens = f.accepted_prediction_tokens();
        fin.rejected_prediction_tokens = f.rejected_prediction_tokens();
      }
    }
    grpc::Status st = reader->Finish();
    if (finished && (st.ok() || cancelled_)) {
      sink(std::move(fin));
      return;
    }
    if (cancelled_) {
      SeqEvent e;
      e.kind = SeqEvent::kFinish;
      e.finish = FinishReason::kCancelled;
      sink(std::move(e));
      return;
    }
    SeqEvent e;
    e.kind = SeqEvent::kError;
    e.status = st.ok() ? absl::InternalError("worker ended the stream without a finish event") : FromGrpc(st);
    sink(std::move(e));
  }

  std::shared_ptr<GrpcWorker::Impl> impl_;
  std::string id_;
  grpc::ClientContext ctx_;
  std::atomic<bool> cancelled_{false};
  std::thread th_;
};

}  // namespace

GrpcWorker::GrpcWorker(std::string name, std::string target) : name_(std::move(name)), impl_(std::make_shared<Impl>()) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  impl_->channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  impl_->stub = pb::InferD::NewStub(impl_->channel);
}

GrpcWorker::~GrpcWorker() = default;

std::unique_ptr<SeqHandle> GrpcWorker::Generate(GenerateParams params, SeqSink sink) {
  return std::make_unique<GrpcSeq>(impl_, std::move(params), std::move(sink));
}

absl::StatusOr<WorkerInfo> GrpcWorker::Health() {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  pb::HealthRequest req;
  pb::HealthReply reply;
  grpc::Status st = impl_->stub->Health(&ctx, req, &reply);
  if (!st.ok()) return absl::UnavailableError(absl::StrCat("health: ", st.error_message()));
  WorkerInfo info;
  info.model = reply.model();
  info.max_context = reply.max_context();
  info.vocab_size = reply.vocab_size();
  info.active_sequences = reply.active_sequences();
  info.max_sequences = reply.max_sequences();
  info.vocab_fingerprint = reply.vocab_fingerprint();
  info.constraint_vocab = reply.constraint_vocab();
  grpc::ClientContext sctx;
  sctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  pb::StatsReply stats;
  if (impl_->stub->Stats(&sctx, pb::StatsRequest(), &stats).ok()) {
    info.tokens_per_second = stats.tokens_per_second();
    info.steps = stats.steps();
    info.expert_hit_rate = stats.expert_hit_rate();
    info.prefix_cache_hit_tokens = stats.prefix_cache_hit_tokens();
    info.max_steps_after_cancel = stats.max_steps_after_cancel();
    info.cancelled = stats.cancelled();
    info.expert_fetches = stats.expert_fetches();
    info.kv_bytes = stats.kv_bytes();
    info.prefix_cache_bytes = stats.prefix_cache_bytes();
    info.prefix_cache_capacity_bytes = stats.prefix_cache_capacity_bytes();
    info.prefix_cache_entries = stats.prefix_cache_entries();
    info.constrained_sequences = stats.constrained_sequences();
    info.constraint_compile_ms = stats.constraint_compile_ms();
    info.last_error = stats.last_error();
    info.errors = stats.errors();
    info.prefix_cache_lookups = stats.prefix_cache_lookups();
    info.speculative = stats.speculative();
    info.spec_decode_steps = stats.spec_decode_steps();
    info.spec_decode_tokens = stats.spec_decode_tokens();
    info.spec_drafted = stats.spec_drafted();
    info.spec_accepted = stats.spec_accepted();
    info.spec_plain_step_us = stats.spec_plain_step_us();
    info.spec_plain_step_tokens = stats.spec_plain_step_tokens();
    info.spec_verify_step_us = stats.spec_verify_step_us();
    info.spec_verify_step_tokens = stats.spec_verify_step_tokens();
    info.spec_guard_blocks = stats.spec_guard_blocks();
    info.peer_remote_jobs = stats.peer_remote_jobs();
    info.peer_fallback_jobs = stats.peer_fallback_jobs();
    info.peer_failed_calls = stats.peer_failed_calls();
    info.peer_bytes_sent = stats.peer_bytes_sent();
    info.peer_bytes_received = stats.peer_bytes_received();
    info.peer_served_jobs = stats.peer_served_jobs();
    info.peer_refused_calls = stats.peer_refused_calls();
    info.spec_drafted_per_position.assign(stats.spec_drafted_per_position().begin(),
                                          stats.spec_drafted_per_position().end());
    info.spec_accepted_per_position.assign(stats.spec_accepted_per_position().begin(),
                                           stats.spec_accepted_per_position().end());
    info.waiting_sequences = stats.waiting_sequences();
    info.prefix_disk_hit_tokens = stats.prefix_disk_hit_tokens();
    info.prefix_disk_bytes = stats.prefix_disk_bytes();
    info.prefix_disk_capacity_bytes = stats.prefix_disk_capacity_bytes();
    info.prefix_disk_files = stats.prefix_disk_files();
    info.prefix_disk_ignored = stats.prefix_disk_ignored();
    info.prefill_passes = stats.prefill_passes();
    info.prefill_pass_rows = stats.prefill_pass_rows();
    info.prefill_pass_capacity_rows = stats.prefill_pass_capacity_rows();
    info.prefill_max_slice_seconds = stats.prefill_max_slice_seconds();
  }
  return info;
}

}  // namespace moe::gateway
