#include "services/expertd_client/client.h"

#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/log.h"
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
  // Reconnect quickly after an expertd restart (default backoff starts at 1 s).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  auto ch = grpc::CreateCustomChannel("unix:" + Path(addr), grpc::InsecureChannelCredentials(), args);
  return ExpertD::NewStub(ch);
}

bool ExpertdGone(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable || s.code() == absl::StatusCode::kFailedPrecondition;
}
}  // namespace

ExpertdClient::Conn::~Conn() {
  if (fd >= 0) ::close(fd);
}

absl::StatusOr<std::unique_ptr<ExpertdClient>> ExpertdClient::ConnectAdmin(const std::string& addr) {
  auto c = std::unique_ptr<ExpertdClient>(new ExpertdClient());
  c->addr_ = addr;
  c->stub_ = MakeStub(addr);
  return c;
}

absl::StatusOr<std::unique_ptr<ExpertdClient>> ExpertdClient::Connect(const std::string& addr,
                                                                      const std::string& name) {
  auto c = std::unique_ptr<ExpertdClient>(new ExpertdClient());
  c->addr_ = addr;
  c->name_ = name;
  c->stub_ = MakeStub(addr);
  MOE_ASSIGN_OR_RETURN(auto conn, c->Attach(1, std::chrono::seconds(10)));
  c->conn_.store(std::move(conn));
  return c;
}

absl::StatusOr<std::shared_ptr<ExpertdClient::Conn>> ExpertdClient::Attach(uint64_t epoch,
                                                                          std::chrono::milliseconds wait) {
  AttachRequest req;
  req.set_pid(static_cast<uint32_t>(::getpid()));
  req.set_client_name(name_);
  AttachReply rep;
  grpc::ClientContext ctx;
  // Waits for expertd (it may be starting, or restarting) at most `wait`: 10 s at start,
  // 2 s when a step finds it gone (long enough for a restart, short enough that streams and
  // requests get their error within seconds), less on a health check.
  ctx.set_deadline(std::chrono::system_clock::now() + wait);
  ctx.set_wait_for_ready(true);
  auto st = stub_->Attach(&ctx, req, &rep);
  if (!st.ok()) return Annotate(FromGrpc(st), absl::StrCat("expertd at ", addr_, ": Attach"));
  if (rep.shm_version() != kShmVersion)
    return absl::FailedPreconditionError(absl::StrCat("expertd speaks shm version ", rep.shm_version(),
                                                      ", this client ", kShmVersion));
  if (epoch > 1 && (rep.num_layers() != num_layers_ || rep.num_experts() != num_experts_ || rep.model_id() != model_id_))
    return absl::FailedPreconditionError(absl::StrCat("expertd at ", addr_, " now serves model '", rep.model_id(),
                                                      "', not '", model_id_, "'"));
  num_layers_ = rep.num_layers();
  num_experts_ = rep.num_experts();
  model_id_ = rep.model_id();
  auto c = std::make_shared<Conn>();
  c->session = rep.session();
  c->token = rep.token();
  c->epoch = epoch;
  MOE_ASSIGN_OR_RETURN(c->fd, ConnectUnix(rep.session_socket()));
  SessionHello hello{kSessionHelloMagic, kSessionWireVersion, rep.session(), 0, rep.token()};
  MOE_RETURN_IF_ERROR(SendWithFds(c->fd, &hello, sizeof hello, {}));
  SessionWelcome w{};
  std::vector<int> fds;
  MOE_RETURN_IF_ERROR(Annotate(RecvWithFds(c->fd, &w, sizeof w, &fds, 2), "expertd session socket"));
  if (w.magic != kSessionWelcomeMagic || w.status != 0 || fds.size() != 2) {
    for (int fd : fds) ::close(fd);
    return absl::PermissionDeniedError(absl::StrCat("expertd refused the session socket (status ", w.status, ")"));
  }
  MOE_ASSIGN_OR_RETURN(c->ctl, ShmRegion::Map(fds[0], w.control_bytes, true));
  MOE_ASSIGN_OR_RETURN(c->arena, ShmRegion::Map(fds[1], w.arena_bytes, false));
  MOE_ASSIGN_OR_RETURN(c->table, ExpertTable::Attach(c->ctl.data(), c->ctl.size(), c->arena.data(), c->arena.size()));
  return c;
}

absl::Status ExpertdClient::Reconnect(const std::shared_ptr<Conn>& seen, std::chrono::milliseconds wait) {
  std::lock_guard<std::mutex> l(reconnect_mu_);
  auto cur = conn_.load();
  if (cur != seen) return absl::OkStatus();  // another thread already did it
  MOE_ASSIGN_OR_RETURN(auto fresh, Attach(seen ? seen->epoch + 1 : 1, wait));
  MOE_LOG(WARNING) << "expertd at " << addr_ << " restarted or dropped the session; re-attached as session "
                   << fresh->session;
  if (seen) retired_.push_back(seen);
  conn_.store(std::move(fresh));
  reconnects_++;
  return absl::OkStatus();
}

absl::Status ExpertdClient::CheckAlive() {
  auto c = conn_.load();
  if (!c || c->detached) return absl::FailedPreconditionError("expertd client is not attached");
  pollfd p{c->fd, static_cast<short>(POLLRDHUP), 0};
  const bool gone = ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
  if (!gone) return absl::OkStatus();
  absl::Status re = Reconnect(c, std::chrono::milliseconds(300));  // a health probe is waiting
  if (!re.ok()) {
    return absl::UnavailableError(absl::StrCat("expertd at ", addr_, " is gone (its session socket closed): ",
                                               re.message()));
  }
  return absl::OkStatus();
}

uint32_t ExpertdClient::session() const {
  auto c = conn_.load();
  return c ? c->session : 0;
}

ExpertdClient::~ExpertdClient() { (void)Detach(); }

absl::Status ExpertdClient::Detach() {
  auto c = conn_.load();
  if (!c || c->detached) return absl::OkStatus();
  c->detached = true;
  DetachRequest req;
  req.set_session(c->session);
  req.set_token(c->token);
  DetachReply rep;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return FromGrpc(stub_->Detach(&ctx, req, &rep));
}

std::optional<Lease> ExpertdClient::TryLease(int layer, int expert) {
  auto c = conn_.load();
  if (!c || c->detached) return std::nullopt;
  auto l = c->table.TryLease(c->session, layer, expert);
  if (l) l->epoch = c->epoch;
  return l;
}

void ExpertdClient::Release(const Lease& lease) {
  auto c = conn_.load();
  // A lease of a previous expertd instance: that instance is gone and so are
  // its lease rows; its arena stays mapped (retired_) until we are destroyed.
  if (c && c->epoch == lease.epoch) c->table.Release(c->session, lease.slab);
}

std::vector<absl::StatusOr<Lease>> ExpertdClient::Acquire(int layer, const std::vector<int>& ids,
                                                           uint64_t* server_wait_ns) {
  std::vector<absl::StatusOr<Lease>> out(ids.size(), absl::UnknownError("not requested"));
  AcquireEach(
      layer, ids, [&](size_t i, absl::StatusOr<Lease> l, bool) { out[i] = std::move(l); }, server_wait_ns);
  return out;
}

void ExpertdClient::AcquireEach(int layer, const std::vector<int>& ids, const AcquireReady& ready,
                                uint64_t* server_wait_ns, bool prefill) {
  std::vector<bool> done(ids.size(), false);
  auto deliver = [&](size_t i, absl::StatusOr<Lease> l, bool shm_hit = false) {
    done[i] = true;
    ready(i, std::move(l), shm_hit);
  };
  auto fail_rest = [&](const absl::Status& s) {
    for (size_t i = 0; i < ids.size(); ++i)
      if (!done[i]) deliver(i, s);
  };
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto c = conn_.load();
    if (!c || c->detached) return fail_rest(absl::FailedPreconditionError("expertd client is not attached"));
    std::vector<size_t> miss;
    std::vector<std::pair<size_t, Lease>> hits;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (done[i]) continue;
      auto l = c->table.TryLease(c->session, layer, ids[i]);
      if (l) {
        l->epoch = c->epoch;
        hits.push_back({i, *l});
      } else {
        miss.push_back(i);
      }
    }
    if (!miss.empty() && layer < 0) {
      for (auto& [i, l] : hits) deliver(i, l, true);
      return fail_rest(absl::InvalidArgumentError(absl::StrCat("invalid layer ", layer)));
    }
    // The request goes out before the hits are handed over: expertd reads
    // the misses while the caller computes the hits.
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<FetchReply>> reader;
    if (!miss.empty()) {
      FetchRequest req;
      req.set_session(c->session);
      req.set_token(c->token);
      req.set_layer(static_cast<uint32_t>(layer));
      req.set_prefill(prefill);
      for (size_t i : miss) req.add_experts(ids[i] < 0 ? 0xffffffffu : static_cast<uint32_t>(ids[i]));
      reader = stub_->FetchExperts(&ctx, req);
    }
    for (auto& [i, l] : hits) deliver(i, l, true);
    if (miss.empty()) return;
    FetchReply rep;
    absl::Status bad;  // a reply naming no requested entry, or one twice
    uint64_t stream_wait_ns = 0;  // each reply counts from the same start: the last is the whole wait
    while (reader->Read(&rep)) {
      stream_wait_ns = std::max<uint64_t>(stream_wait_ns, rep.server_wait_ns());
      for (const SlabHandle& h : rep.slabs()) {
        const bool ok_index = h.index() < miss.size() && !done[miss[h.index()]];
        if (!ok_index || (h.error_code() == 0 && h.slab() >= c->table.num_slabs())) {
          bad = absl::InternalError(absl::StrCat("expertd: malformed FetchExperts reply (index ", h.index(),
                                                 ", slab ", h.slab(), ")"));
          if (ok_index) deliver(miss[h.index()], bad);
          continue;
        }
        const size_t i = miss[h.index()];
        if (h.error_code() != 0) {
          deliver(i, absl::Status(static_cast<absl::StatusCode>(h.error_code()), h.error()));
          continue;
        }
        Lease l;
        c->table.Describe(h.slab(), &l);  // leased for us by expertd: the descriptor is stable
        l.epoch = c->epoch;
        deliver(i, l);
      }
    }
    const absl::Status st = FromGrpc(reader->Finish());
    if (server_wait_ns != nullptr) *server_wait_ns += stream_wait_ns;
    if (std::all_of(miss.begin(), miss.end(), [&](size_t i) { return done[i]; })) return;
    if (!st.ok() && attempt == 0 && ExpertdGone(st) && Reconnect(c, std::chrono::seconds(2)).ok()) {
      continue;  // the rest from the new instance
    }
    return fail_rest(!st.ok() ? st
                     : !bad.ok() ? bad
                                 : absl::InternalError("expertd: FetchExperts ended before every expert was sent"));
  }
}

absl::StatusOr<uint32_t> ExpertdClient::Hint(int layer, const std::vector<int>& ids, bool lookahead) {
  auto c = conn_.load();
  if (!c) return absl::FailedPreconditionError("expertd client is not attached");
  HintRequest req;
  req.set_session(c->session);
  req.set_token(c->token);
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
