#include "services/peer/peer_server.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "services/peer/expert_stream.h"
#include "services/peer/wire.h"

namespace moe::peer {
namespace {

// Constant-time comparison: the token check must not leak a prefix by timing.
bool SameToken(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;  // the length is not the secret
  unsigned char d = 0;
  for (size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
}

constexpr int64_t kMaxRowsPerCall = 65536;

}  // namespace

grpc::Status PeerService::Refuse(grpc::StatusCode code, const std::string& why) {
  ++refused_;
  return grpc::Status(code, why);
}

grpc::Status PeerService::Admit(grpc::ServerContext* ctx, const std::string& identity, uint64_t epoch) {
  ++calls_;
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  const std::string want = "Bearer " + opt_.token;
  if (it == md.end() || !SameToken(std::string_view(it->second.data(), it->second.size()), want)) {
    return Refuse(grpc::StatusCode::UNAUTHENTICATED, "peer: missing or wrong bearer token");
  }
  if (identity != opt_.model_identity) {
    return Refuse(grpc::StatusCode::FAILED_PRECONDITION,
                  absl::StrCat("peer: this host serves model '", opt_.model_identity, "', the request is for '",
                               identity, "'"));
  }
  if (epoch != opt_.epoch) {
    return Refuse(grpc::StatusCode::FAILED_PRECONDITION,
                  absl::StrCat("peer: this host's ownership map is epoch ", opt_.epoch, ", the request's ", epoch));
  }
  return grpc::Status::OK;
}

grpc::Status PeerService::FetchExpert(grpc::ServerContext* ctx, const FetchExpertRequest* req,
                                      grpc::ServerWriter<ExpertChunk>* writer) {
  if (grpc::Status s = Admit(ctx, req->model_identity(), req->epoch()); !s.ok()) return s;
  if (absl::Status st = model_->CheckRoutedExpert(req->layer(), req->expert()); !st.ok()) {
    return Refuse(grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("peer: ", st.message()));
  }
  // Fetched for a peer's prefill chunk: streamed without displacing this host's decode working set.
  absl::StatusOr<ExpertLease> lease = absl::UnknownError("not fetched");
  const int one[1] = {req->expert()};
  absl::Status got = model_->expert_source().GetEach(
      req->layer(), one,
      [&](size_t, ExpertLease l) {
        lease = std::move(l);
        return absl::OkStatus();
      },
      FetchUse::kPrefill);
  if (!got.ok()) lease = got;
  if (!lease.ok()) return Refuse(grpc::StatusCode::UNAVAILABLE, absl::StrCat("peer: ", lease.status().message()));
  const uint32_t crc = opt_.record_crc ? opt_.record_crc(req->layer(), req->expert()) : 0;
  if (!StreamExpert(lease->weights(), crc,
                    [&](const ExpertChunk& chunk) { return !ctx->IsCancelled() && writer->Write(chunk); })) {
    return Refuse(grpc::StatusCode::CANCELLED, "peer: the caller went away");
  }
  ++fetches_;
  return grpc::Status::OK;
}

grpc::Status PeerService::RunExperts(grpc::ServerContext* ctx, const RunExpertsRequest* req, RunExpertsReply* reply) {
  if (grpc::Status s = Admit(ctx, req->model_identity(), req->epoch()); !s.ok()) return s;
  const int64_t H = model_->config().hidden_size;
  if (req->hidden() != H) {
    return Refuse(grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("peer: hidden ", req->hidden(), ", the model's is ", H));
  }
  const int64_t n = req->num_rows();
  if (n < 1 || n > kMaxRowsPerCall) {
    return Refuse(grpc::StatusCode::INVALID_ARGUMENT,
                  absl::StrCat("peer: num_rows ", n, " outside 1..", kMaxRowsPerCall));
  }
  if (req->jobs_size() == 0) return Refuse(grpc::StatusCode::INVALID_ARGUMENT, "peer: no jobs");
  auto x = DecodeRows(req->x_bf16(), req->x_f32(), static_cast<size_t>(n * H), "peer: x");
  if (!x.ok()) return Refuse(grpc::StatusCode::INVALID_ARGUMENT, std::string(x.status().message()));
  std::vector<RemoteExpertJob> jobs(req->jobs_size());
  int64_t pairs = 0;
  std::set<int> seen;
  for (int j = 0; j < req->jobs_size(); ++j) {
    const ExpertJob& ej = req->jobs(j);
    if (ej.rows_size() == 0) {
      return Refuse(grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("peer: job ", j, " (expert ", ej.expert(), ") has no rows"));
    }
    if (!seen.insert(ej.expert()).second) {
      return Refuse(grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("peer: expert ", ej.expert(), " asked twice"));
    }
    jobs[j].expert = ej.expert();
    jobs[j].rows.assign(ej.rows().begin(), ej.rows().end());
    pairs += ej.rows_size();
  }
  // Bounded work: past the bound the caller computes these itself (its fallback).
  if (in_flight_.fetch_add(pairs) + pairs > opt_.max_rows_in_flight) {
    in_flight_.fetch_sub(pairs);
    return Refuse(grpc::StatusCode::RESOURCE_EXHAUSTED,
                  absl::StrCat("peer: ", pairs, " rows would exceed ", opt_.max_rows_in_flight, " in flight"));
  }
  struct Release {
    std::atomic<int64_t>& c;
    int64_t n;
    ~Release() { c.fetch_sub(n); }
  } release{in_flight_, pairs};
  if (ctx->IsCancelled()) return Refuse(grpc::StatusCode::CANCELLED, "peer: the caller cancelled");
  std::vector<std::vector<float>> out;
  absl::Status st = model_->RunExperts(req->layer(), x->data(), n, jobs, out);
  if (!st.ok()) {
    const grpc::StatusCode code = absl::IsInvalidArgument(st) ? grpc::StatusCode::INVALID_ARGUMENT
                                  : absl::IsNotFound(st)      ? grpc::StatusCode::NOT_FOUND
                                                              : grpc::StatusCode::UNAVAILABLE;
    return Refuse(code, absl::StrCat("peer: ", st.message()));
  }
  if (ctx->IsCancelled()) return Refuse(grpc::StatusCode::CANCELLED, "peer: the caller cancelled");
  for (size_t j = 0; j < jobs.size(); ++j) {
    ExpertOutput* o = reply->add_outputs();
    o->set_expert(jobs[j].expert);
    o->set_record_crc(opt_.record_crc ? opt_.record_crc(req->layer(), jobs[j].expert) : 0);
    EncodeRows(out[j].data(), out[j].size(), o->mutable_y_bf16(), o->mutable_y_f32());
  }
  jobs_ += static_cast<int64_t>(jobs.size());
  rows_ += pairs;
  return grpc::Status::OK;
}

PeerServerStats PeerService::stats() const {
  return {calls_.load(), refused_.load(), jobs_.load(), rows_.load(), fetches_.load()};
}

absl::StatusOr<std::unique_ptr<PeerNode>> PeerNode::Start(const Model* model, std::unique_ptr<PeerClient> client,
                                                          const std::string& listen, PeerServerOptions server_opt) {
  auto node = std::unique_ptr<PeerNode>(new PeerNode());
  node->client_ = std::move(client);
  if (!listen.empty()) {
    if (server_opt.token.empty()) return absl::InvalidArgumentError("peer server: a bearer token is required");
    if (listen.rfind("unix:", 0) == 0) {
      return absl::InvalidArgumentError("peer server: --peer-listen takes HOST:PORT (peers are other hosts)");
    }
    const bool tls = server_opt.tls.enabled();
    std::shared_ptr<grpc::ServerCredentials> creds = PeerServerCredentials(server_opt.tls);
    node->service_ = std::make_unique<PeerService>(model, std::move(server_opt));
    grpc::ServerBuilder b;
    b.AddListeningPort(listen, creds, &node->port_);
    b.RegisterService(node->service_.get());
    b.SetMaxReceiveMessageSize(256 << 20);
    b.SetMaxSendMessageSize(256 << 20);
    node->server_ = b.BuildAndStart();
    if (!node->server_ || node->port_ == 0) {
      return absl::UnavailableError(absl::StrCat("peer server: cannot listen on ", listen));
    }
    MOE_LOG(INFO) << "peer: serving RunExperts on " << listen << " (port " << node->port_ << ", "
                  << (tls ? "mTLS" : "plaintext TCP") << " + bearer token)";
  }
  return node;
}

PeerNode::~PeerNode() {
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_.reset();
  service_.reset();
  client_.reset();
}

}  // namespace moe::peer
