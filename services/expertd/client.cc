#include "services/expertd/client.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/expertstore/fd_passing.h"

namespace moe::expertd {

using namespace expertstore;

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

namespace {
std::string Path(const std::string& addr) { return absl::StartsWith(addr, "unix:") ? addr.substr(5) : addr; }

std::unique_ptr<ExpertD::Stub> MakeStub(const std::string& addr) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  auto ch = grpc::CreateCustomChannel("unix:" + Path(addr), grpc::InsecureChannelCredentials(), args);
  return ExpertD::NewStub(ch);
}
}  // namespace

absl::StatusOr<std::unique_ptr<ExpertdClient>> ExpertdClient::ConnectAdmin(const std::string& addr) {
  auto c = std::unique_ptr<ExpertdClient>(new ExpertdClient());
  c->stub_ = MakeStub(addr);
  return c;
}

absl::StatusOr<std::unique_ptr<ExpertdClient>> ExpertdClient::Connect(const std::string& addr,
                                                                      const std::string& name) {
  auto c = std::unique_ptr<ExpertdClient>(new ExpertdClient());
  c->stub_ = MakeStub(addr);
  AttachRequest req;
  req.set_pid(static_cast<uint32_t>(::getpid()));
  req.set_client_name(name);
  AttachReply rep;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  ctx.set_wait_for_ready(true);
  auto st = c->stub_->Attach(&ctx, req, &rep);
  if (!st.ok()) return Annotate(FromGrpc(st), absl::StrCat("expertd at ", addr, ": Attach"));
  c->session_ = rep.session();
  c->token_ = rep.token();
  c->attached_ = true;
  c->num_layers_ = rep.num_layers();
  c->num_experts_ = rep.num_experts();
  c->model_id_ = rep.model_id();
  if (rep.shm_version() != kShmVersion)
    return absl::FailedPreconditionError(absl::StrCat("expertd speaks shm version ", rep.shm_version(),
                                                      ", this client ", kShmVersion));
  MOE_ASSIGN_OR_RETURN(c->session_fd_, ConnectUnix(rep.session_socket()));
  SessionHello hello{kSessionHelloMagic, kSessionWireVersion, rep.session(), 0, rep.token()};
  MOE_RETURN_IF_ERROR(SendWithFds(c->session_fd_, &hello, sizeof hello, {}));
  SessionWelcome w{};
  std::vector<int> fds;
  MOE_RETURN_IF_ERROR(Annotate(RecvWithFds(c->session_fd_, &w, sizeof w, &fds, 2), "expertd session socket"));
  if (w.magic != kSessionWelcomeMagic || w.status != 0 || fds.size() != 2) {
    for (int fd : fds) ::close(fd);
    return absl::PermissionDeniedError(absl::StrCat("expertd refused the session socket (status ", w.status, ")"));
  }
  MOE_ASSIGN_OR_RETURN(c->ctl_, ShmRegion::Map(fds[0], w.control_bytes, true));
  MOE_ASSIGN_OR_RETURN(c->arena_, ShmRegion::Map(fds[1], w.arena_bytes, false));
  MOE_ASSIGN_OR_RETURN(c->table_, ExpertTable::Attach(c->ctl_.data(), c->ctl_.size(), c->arena_.data(),
                                                      c->arena_.size()));
  return c;
}

ExpertdClient::~ExpertdClient() {
  (void)Detach();
  if (session_fd_ >= 0) ::close(session_fd_);
}

absl::Status ExpertdClient::Detach() {
  if (!attached_) return absl::OkStatus();
  attached_ = false;
  DetachRequest req;
  req.set_session(session_);
  req.set_token(token_);
  DetachReply rep;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return FromGrpc(stub_->Detach(&ctx, req, &rep));
}

std::optional<Lease> ExpertdClient::TryLease(int layer, int expert) {
  if (!attached_ || session_fd_ < 0) return std::nullopt;
  return table_.TryLease(session_, layer, expert);
}

void ExpertdClient::Release(const Lease& lease) {
  if (session_fd_ >= 0) table_.Release(session_, lease.slab);
}

std::vector<absl::StatusOr<Lease>> ExpertdClient::Acquire(int layer, const std::vector<int>& ids) {
  std::vector<absl::StatusOr<Lease>> out(ids.size(), absl::UnknownError("not requested"));
  FetchRequest req;
  std::vector<size_t> miss;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (auto l = TryLease(layer, ids[i])) {
      out[i] = *l;
    } else {
      miss.push_back(i);
    }
  }
  if (miss.empty()) return out;
  if (!attached_ || session_fd_ < 0) {
    for (size_t i : miss) out[i] = absl::FailedPreconditionError("expertd client is not attached");
    return out;
  }
  if (layer < 0) {
    for (size_t i : miss) out[i] = absl::InvalidArgumentError(absl::StrCat("invalid layer ", layer));
    return out;
  }
  req.set_session(session_);
  req.set_token(token_);
  req.set_layer(static_cast<uint32_t>(layer));
  for (size_t i : miss) req.add_experts(ids[i] < 0 ? 0xffffffffu : static_cast<uint32_t>(ids[i]));
  FetchReply rep;
  grpc::ClientContext ctx;
  auto st = stub_->FetchExperts(&ctx, req, &rep);
  if (!st.ok() || rep.slabs_size() != int(miss.size())) {
    absl::Status e = st.ok() ? absl::InternalError("expertd: malformed FetchExperts reply") : FromGrpc(st);
    for (size_t i : miss) out[i] = e;
    return out;
  }
  for (size_t j = 0; j < miss.size(); ++j) {
    const SlabHandle& h = rep.slabs(int(j));
    if (h.error_code() != 0) {
      out[miss[j]] = absl::Status(static_cast<absl::StatusCode>(h.error_code()), h.error());
      continue;
    }
    Lease l;
    table_.Describe(h.slab(), &l);  // leased for us by expertd: the descriptor is stable
    out[miss[j]] = l;
  }
  return out;
}

absl::StatusOr<uint32_t> ExpertdClient::Hint(int layer, const std::vector<int>& ids, bool lookahead) {
  HintRequest req;
  req.set_session(session_);
  req.set_token(token_);
  auto* h = req.add_hints();
  h->set_layer(static_cast<uint32_t>(layer));
  h->set_source(lookahead ? LayerHint::LOOKAHEAD : LayerHint::CURRENT);
  for (int id : ids) h->add_experts(static_cast<uint32_t>(id));
  HintReply rep;
  grpc::ClientContext ctx;
  auto st = stub_->Hint(&ctx, req, &rep);
  if (!st.ok()) return FromGrpc(st);
  return rep.reads_started();
}

absl::StatusOr<StatsReply> ExpertdClient::Stats() {
  StatsReply rep;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto st = stub_->Stats(&ctx, StatsRequest(), &rep);
  if (!st.ok()) return FromGrpc(st);
  return rep;
}

absl::StatusOr<HeatReply> ExpertdClient::Heat() {
  HeatReply rep;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto st = stub_->Heat(&ctx, HeatRequest(), &rep);
  if (!st.ok()) return FromGrpc(st);
  return rep;
}

absl::Status ExpertdClient::Pin(int layer, int expert, bool pinned) {
  PinRequest req;
  req.set_layer(static_cast<uint32_t>(layer));
  req.set_expert(static_cast<uint32_t>(expert));
  req.set_pinned(pinned);
  PinReply rep;
  grpc::ClientContext ctx;
  return FromGrpc(stub_->Pin(&ctx, req, &rep));
}

absl::StatusOr<uint64_t> ExpertdClient::SetBudget(uint64_t bytes) {
  SetBudgetRequest req;
  req.set_bytes(bytes);
  SetBudgetReply rep;
  grpc::ClientContext ctx;
  auto st = stub_->SetBudget(&ctx, req, &rep);
  if (!st.ok()) return FromGrpc(st);
  return rep.active_bytes();
}

}  // namespace moe::expertd
