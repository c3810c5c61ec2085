#include "services/peer/peer_client.h"

#include <condition_variable>
#include <map>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "proto/peer.grpc.pb.h"
#include "services/peer/expert_stream.h"
#include "services/peer/wire.h"

namespace moe::peer {

using Clock = std::chrono::steady_clock;

struct PeerClient::Host {
  std::string address;
  std::unique_ptr<ExpertPeer::Stub> stub;
  std::atomic<int64_t> suspect_until_ns{0};  // Clock time; 0: trusted
};

namespace {

// One host's RunExperts of a call.
struct HostCall {
  int host = 0;
  std::vector<size_t> jobs;  // indices into the call's jobs
  grpc::ClientContext ctx;
  RunExpertsRequest req;
  RunExpertsReply reply;
  grpc::Status status;
  bool done = false;
};

}  // namespace

class PeerCall final : public RemoteExpertCall {
 public:
  PeerCall(PeerClient* client, std::span<const RemoteExpertJob> jobs, int64_t H)
      : client_(client), jobs_(jobs), H_(H) {}
  ~PeerCall() override {
    // Wait was skipped (an error path): cancel and wait, the callbacks use *this.
    if (!waited_) {
      for (auto& c : calls_) c->ctx.TryCancel();
      WaitAll();
    }
  }

  void Send(std::unique_ptr<HostCall> c) {
    HostCall* raw = c.get();
    calls_.push_back(std::move(c));
    PeerClient::Host& h = *client_->hosts_[raw->host];
    h.stub->async()->RunExperts(&raw->ctx, &raw->req, &raw->reply, [this, raw](grpc::Status s) {
      std::lock_guard<std::mutex> l(mu_);
      raw->status = std::move(s);
      raw->done = true;
      cv_.notify_all();
    });
  }

  std::vector<std::vector<float>> Wait() override {
    waited_ = true;
    WaitAll();
    std::vector<std::vector<float>> out(jobs_.size());
    int64_t received = 0, fallback = 0, failed = 0;
    for (auto& c : calls_) {
      absl::Status st = Collect(*c, out, &received);
      if (!st.ok()) {
        ++failed;
        fallback += static_cast<int64_t>(c->jobs.size());
        for (size_t j : c->jobs) out[j].clear();
        client_->MarkFailed(c->host, std::string(st.message()));
      }
    }
    std::lock_guard<std::mutex> l(client_->mu_);
    client_->stats_.bytes_received += received;
    client_->stats_.fallback_jobs += fallback;
    client_->stats_.failed_calls += failed;
    return out;
  }

 private:
  void WaitAll() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] {
      for (auto& c : calls_) {
        if (!c->done) return false;
      }
      return true;
    });
  }

  absl::Status Collect(HostCall& c, std::vector<std::vector<float>>& out, int64_t* received) {
    const std::string& addr = client_->hosts_[c.host]->address;
    if (!c.status.ok()) {
      return absl::UnavailableError(absl::StrCat("peer ", c.host, " (", addr, "): RunExperts: ",
                                                 c.status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                                                     ? "deadline exceeded"
                                                     : c.status.error_message()));
    }
    if (c.reply.outputs_size() != static_cast<int>(c.jobs.size())) {
      return absl::DataLossError(absl::StrCat("peer ", c.host, " (", addr, "): ", c.reply.outputs_size(),
                                              " outputs for ", c.jobs.size(), " experts"));
    }
    for (size_t i = 0; i < c.jobs.size(); ++i) {
      const RemoteExpertJob& job = jobs_[c.jobs[i]];
      const ExpertOutput& o = c.reply.outputs(static_cast<int>(i));
      if (o.expert() != job.expert) {
        return absl::DataLossError(absl::StrCat("peer ", c.host, " (", addr, "): output ", i, " is expert ",
                                                o.expert(), ", asked ", job.expert));
      }
      const uint32_t mine = client_->opt_.record_crc ? client_->opt_.record_crc(c.req.layer(), job.expert) : 0;
      if (mine != 0 && o.record_crc() != 0 && mine != o.record_crc()) {
        return absl::DataLossError(absl::StrCat("peer ", c.host, " (", addr, "): expert (layer ", c.req.layer(),
                                                ", id ", job.expert, ") record CRC ", o.record_crc(),
                                                " is not this host's ", mine, " (different model bytes)"));
      }
      auto y = DecodeRows(o.y_bf16(), o.y_f32(), job.rows.size() * static_cast<size_t>(H_), "RunExperts reply");
      if (!y.ok()) return absl::DataLossError(absl::StrCat("peer ", c.host, " (", addr, "): ", y.status().message()));
      *received += static_cast<int64_t>(o.y_bf16().size() + o.y_f32().size());
      out[c.jobs[i]] = std::move(*y);
    }
    return absl::OkStatus();
  }

  PeerClient* client_;
  std::span<const RemoteExpertJob> jobs_;
  int64_t H_;
  std::vector<std::unique_ptr<HostCall>> calls_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool waited_ = false;
};

absl::StatusOr<std::unique_ptr<PeerClient>> PeerClient::Create(OwnershipMap map, PeerClientOptions opt) {
  if (opt.self < 0 || opt.self >= static_cast<int>(map.hosts.size())) {
    return absl::InvalidArgumentError(absl::StrCat("host index ", opt.self, " is not in the ownership map (",
                                                   map.hosts.size(), " hosts)"));
  }
  if (opt.token.empty()) return absl::InvalidArgumentError("peer token is empty");
  auto c = std::unique_ptr<PeerClient>(new PeerClient());
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  for (size_t i = 0; i < map.hosts.size(); ++i) {
    auto h = std::make_unique<Host>();
    h->address = map.hosts[i];
    if (static_cast<int>(i) != opt.self) {
      h->stub = ExpertPeer::NewStub(grpc::CreateCustomChannel(h->address, PeerChannelCredentials(opt.tls), args));
    }
    c->hosts_.push_back(std::move(h));
  }
  c->map_ = std::move(map);
  c->opt_ = std::move(opt);
  return c;
}

PeerClient::~PeerClient() = default;

RemoteExperts::Placement PeerClient::Place(int layer, int expert, int64_t rows) const {
  const int h = map_.HostFor(opt_.self, layer, expert);
  if (h == opt_.self) return Placement::kLocal;
  const int64_t until = hosts_[h]->suspect_until_ns.load(std::memory_order_relaxed);
  if (until != 0 && Clock::now().time_since_epoch().count() < until) return Placement::kLocal;
  if (opt_.record_bytes && opt_.row_wire_bytes > 0) {
    const int64_t record = opt_.record_bytes(layer, expert);  // 0: unknown, send
    if (record > 0 && rows * opt_.row_wire_bytes > record) {
      return opt_.fetch_weights ? Placement::kFetch : Placement::kLocal;
    }
  }
  return Placement::kRemote;
}

absl::StatusOr<ExpertLease> PeerClient::FetchWeights(int layer, int expert) {
  const int h = map_.HostFor(opt_.self, layer, expert);
  if (h == opt_.self) return absl::InvalidArgumentError("FetchWeights of an expert this host owns");
  absl::StatusOr<ExpertLease> got = [&]() -> absl::StatusOr<ExpertLease> {
    FetchExpertRequest q;
    q.set_model_identity(opt_.model_identity);
    q.set_epoch(map_.epoch);
    q.set_layer(layer);
    q.set_expert(expert);
    grpc::ClientContext ctx;
    const int64_t record = opt_.record_bytes ? opt_.record_bytes(layer, expert) : 0;
    const auto budget = opt_.deadline + std::chrono::milliseconds(static_cast<int64_t>(
                                            1e3 * static_cast<double>(record) / opt_.fetch_min_bytes_per_second));
    ctx.set_deadline(std::chrono::system_clock::now() + budget);
    ctx.AddMetadata("authorization", "Bearer " + opt_.token);
    auto reader = hosts_[h]->stub->FetchExpert(&ctx, q);
    const std::string where = absl::StrCat("peer ", h, " (", hosts_[h]->address, "): FetchExpert (layer ", layer,
                                           ", id ", expert, "): ");
    ExpertAssembler assembler;
    ExpertChunk chunk;
    bool first = true;
    while (reader->Read(&chunk)) {
      if (absl::Status st = assembler.Add(chunk); !st.ok()) {
        ctx.TryCancel();
        reader->Finish();
        return absl::DataLossError(absl::StrCat(where, st.message()));
      }
      if (first) {
        first = false;
        const uint32_t mine = opt_.record_crc ? opt_.record_crc(layer, expert) : 0;
        if (mine != 0 && assembler.record_crc() != 0 && mine != assembler.record_crc()) {
          ctx.TryCancel();
          reader->Finish();
          return absl::DataLossError(
              absl::StrCat(where, "record CRC ", assembler.record_crc(), " is not this host's ", mine));
        }
      }
    }
    grpc::Status s = reader->Finish();
    if (!s.ok()) {
      return absl::UnavailableError(absl::StrCat(
          where, s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ? "deadline exceeded" : s.error_message()));
    }
    absl::StatusOr<ExpertLease> lease = assembler.Finish();
    if (!lease.ok()) return absl::DataLossError(absl::StrCat(where, lease.status().message()));
    {
      std::lock_guard<std::mutex> l(mu_);
      ++stats_.fetched_experts;
      stats_.fetched_bytes += assembler.total_bytes();
    }
    return lease;
  }();
  if (!got.ok()) {
    {
      std::lock_guard<std::mutex> l(mu_);
      ++stats_.fetch_failures;
    }
    MarkFailed(h, std::string(got.status().message()));
  }
  return got;
}

std::unique_ptr<RemoteExpertCall> PeerClient::Start(int layer, const float* x, int64_t S, int64_t H,
                                                    std::span<const RemoteExpertJob> jobs) {
  auto call = std::make_unique<PeerCall>(this, jobs, H);
  std::map<int, std::vector<size_t>> by_host;
  for (size_t j = 0; j < jobs.size(); ++j) by_host[map_.HostFor(opt_.self, layer, jobs[j].expert)].push_back(j);
  int64_t sent = 0;
  const auto now = std::chrono::system_clock::now();
  for (auto& [host, idx] : by_host) {
    auto c = std::make_unique<HostCall>();
    c->host = host;
    c->jobs = idx;
    // The rows this host's experts use, compacted in ascending order.
    std::vector<int64_t> local_of(S, -1), rows;
    for (size_t j : idx) {
      for (int64_t r : jobs[j].rows) {
        if (local_of[r] < 0) local_of[r] = 0;
      }
    }
    for (int64_t r = 0; r < S; ++r) {
      if (local_of[r] >= 0) {
        local_of[r] = static_cast<int64_t>(rows.size());
        rows.push_back(r);
      }
    }
    std::vector<float> xs(rows.size() * H);
    for (size_t i = 0; i < rows.size(); ++i) std::memcpy(xs.data() + i * H, x + rows[i] * H, H * sizeof(float));
    RunExpertsRequest& q = c->req;
    q.set_model_identity(opt_.model_identity);
    q.set_epoch(map_.epoch);
    q.set_layer(layer);
    q.set_hidden(static_cast<int32_t>(H));
    q.set_num_rows(static_cast<int32_t>(rows.size()));
    EncodeRows(xs.data(), xs.size(), q.mutable_x_bf16(), q.mutable_x_f32());
    sent += static_cast<int64_t>(q.x_bf16().size() + q.x_f32().size());
    for (size_t j : idx) {
      ExpertJob* ej = q.add_jobs();
      ej->set_expert(jobs[j].expert);
      for (int64_t r : jobs[j].rows) ej->add_rows(static_cast<int32_t>(local_of[r]));
    }
    c->ctx.set_deadline(now + opt_.deadline + opt_.per_expert * static_cast<int64_t>(idx.size()));
    c->ctx.AddMetadata("authorization", "Bearer " + opt_.token);
    call->Send(std::move(c));
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    stats_.calls += static_cast<int64_t>(by_host.size());
    stats_.remote_jobs += static_cast<int64_t>(jobs.size());
    stats_.bytes_sent += sent;
  }
  return call;
}

void PeerClient::MarkFailed(int host, const std::string& why) {
  const int64_t until = (Clock::now() + opt_.suspect_for).time_since_epoch().count();
  const int64_t before = hosts_[host]->suspect_until_ns.exchange(until);
  {
    std::lock_guard<std::mutex> l(mu_);
    ++stats_.suspect_marks;
  }
  // One line per suspicion period, not per layer.
  if (before == 0 || Clock::now().time_since_epoch().count() >= before) {
    MOE_LOG(WARNING) << why << "; its experts run on this host for the next " << opt_.suspect_for.count() << " ms";
  }
}

PeerClientStats PeerClient::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

}  // namespace moe::peer
