#include "services/expertd_client/remote_expert_source.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"

namespace moe::expertd {

namespace {
constexpr size_t kMaxQueuedHints = 4096;
}

absl::StatusOr<std::unique_ptr<RemoteExpertSource>> RemoteExpertSource::Connect(const std::string& addr,
                                                                                const Container* container) {
  auto s = std::unique_ptr<RemoteExpertSource>(new RemoteExpertSource());
  MOE_ASSIGN_OR_RETURN(s->client_, ExpertdClient::Connect(addr, "engine"));
  s->container_ = container;
  const auto& info = container->info();
  if (s->client_->num_layers() != uint32_t(info.num_hidden_layers + 1) ||
      s->client_->num_experts() != uint32_t(info.n_routed_experts))
    return absl::FailedPreconditionError(absl::StrCat(
        "expertd at ", addr, " serves model '", s->client_->model_id(), "' (", s->client_->num_layers(), " x ",
        s->client_->num_experts(), "), not this container (", info.num_hidden_layers + 1, " x ",
        info.n_routed_experts, ")"));
  s->hint_thread_ = std::thread([p = s.get()] { p->HintLoop(); });
  return s;
}

RemoteExpertSource::~RemoteExpertSource() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (hint_thread_.joinable()) hint_thread_.join();
}

ExpertLease RemoteExpertSource::MakeLease(const expertstore::Lease& l, const ExpertRecordInfo& rec) {
  auto w = std::make_unique<ExpertWeights>();
  auto view = Container::ViewRecord(rec, l.data);
  ExpertMatrix* m[3] = {&w->gate, &w->up, &w->down};
  for (int p = 0; p < 3; ++p) {
    m[p]->format = view[p].format;
    m[p]->rows = view[p].rows;
    m[p]->cols = view[p].cols;
    m[p]->data = view[p].data;
    m[p]->scales = view[p].scales;
  }
  const ExpertWeights* raw = w.release();
  ExpertdClient* c = client_.get();
  expertstore::Lease copy = l;
  return ExpertLease(raw, [c, copy, raw] {
    c->Release(copy);
    delete raw;
  });
}

absl::StatusOr<ExpertLease> RemoteExpertSource::Get(int layer, int expert) {
  absl::StatusOr<ExpertLease> out = absl::UnknownError("not fetched");
  const int one[1] = {expert};
  absl::Status s = GetEach(
      layer, one,
      [&](size_t, ExpertLease l) {
        out = std::move(l);
        return absl::OkStatus();
      },
      FetchUse::kDecode);
  if (!s.ok()) return s;
  return out;
}

absl::Status RemoteExpertSource::GetEach(int layer, std::span<const int> experts, const ExpertReady& ready,
                                         FetchUse use) {
  std::vector<const ExpertRecordInfo*> recs(experts.size());
  for (size_t i = 0; i < experts.size(); ++i) {
    recs[i] = container_->FindExpert(layer, experts[i]);
    if (recs[i] == nullptr)
      return absl::NotFoundError(
          absl::StrCat("no routed expert (layer ", layer, ", id ", experts[i], ") in the container"));
  }
  gets_ += static_cast<int64_t>(experts.size());
  std::vector<int> ids(experts.begin(), experts.end());
  absl::Status first;  // the first error; later leases are dropped unused
  // The time this call blocked (its wall time minus the caller's work in
  // `ready`) is split: up to expertd's own wait (FetchReply.server_wait_ns)
  // is fetch wait, the rest IPC (leases, the RPC). What expertd waited while
  // the caller computed earlier experts cost the caller nothing and is not
  // counted.
  const auto t0 = std::chrono::steady_clock::now();
  int64_t in_ready_ns = 0;
  uint64_t server_wait_ns = 0;
  auto on_lease = [&](size_t i, absl::StatusOr<expertstore::Lease> l, bool shm_hit) {
    if (l.ok()) {
      (shm_hit ? hits_ : misses_)++;
      if (!shm_hit) bytes_ += static_cast<int64_t>(l->length);
    }
    if (!first.ok()) {
      if (l.ok()) client_->Release(*l);
      return;
    }
    if (!l.ok()) {
      first = l.status();
      return;
    }
    if (l->length < recs[i]->length) {
      first = absl::DataLossError(absl::StrCat("expertd returned ", l->length, " bytes for (layer ", layer, ", id ",
                                               ids[i], "), the container says ", recs[i]->length));
      client_->Release(*l);
      return;
    }
    const auto r0 = std::chrono::steady_clock::now();
    first = ready(i, MakeLease(*l, *recs[i]));
    in_ready_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - r0).count();
  };
  client_->AcquireEach(layer, ids, on_lease, &server_wait_ns, use == FetchUse::kPrefill);
  const int64_t took =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  const int64_t blocked = std::max<int64_t>(0, took - in_ready_ns);
  const int64_t wait = std::min<int64_t>(blocked, static_cast<int64_t>(server_wait_ns));
  wait_ns_ += wait;
  ipc_ns_ += blocked - wait;
  return first;
}

void RemoteExpertSource::Hint(std::span<const ExpertKey> keys) { Queue(keys, /*lookahead=*/false); }
void RemoteExpertSource::HintAhead(std::span<const ExpertKey> keys) { Queue(keys, /*lookahead=*/true); }

void RemoteExpertSource::Queue(std::span<const ExpertKey> keys, bool lookahead) {
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& k : keys) {
      if (hints_.size() >= kMaxQueuedHints) break;
      hints_.push_back({k, lookahead});
    }
  }
  cv_.notify_one();
}

void RemoteExpertSource::HintLoop() {
  for (;;) {
    // (current, layer) -> ids; look-ahead hints go first, so that expertd
    // keeps their resident experts through the current layer's fills.
    std::map<std::pair<bool, int>, std::vector<int>> by_layer;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || !hints_.empty(); });
      if (stop_) return;
      for (const auto& [k, ahead] : hints_) by_layer[{!ahead, k.layer}].push_back(k.expert);
      hints_.clear();
    }
    for (auto& [kind, ids] : by_layer) (void)client_->Hint(kind.second, ids, !kind.first);  // best effort
  }
}

ExpertSourceStats RemoteExpertSource::Stats() const {
  ExpertSourceStats s;
  s.gets = gets_;
  s.hits = hits_;
  s.misses = misses_;
  s.bytes_read = bytes_;
  s.fetch_wait_seconds = static_cast<double>(wait_ns_.load()) * 1e-9;
  s.ipc_seconds = static_cast<double>(ipc_ns_.load()) * 1e-9;
  return s;
}

ContainerSourceFactory RemoteSourceFactory(const std::string& addr) {
  return [addr](const Container& c) -> absl::StatusOr<std::unique_ptr<ExpertSource>> {
    auto src = RemoteExpertSource::Connect(addr, &c);
    if (!src.ok()) return Annotate(src.status(), absl::StrCat("--expertd ", addr));
    return std::unique_ptr<ExpertSource>(std::move(*src));
  };
}

}  // namespace moe::expertd
