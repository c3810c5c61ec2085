#include "services/expertd/expertd_service.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"

namespace moe::expertd {

using namespace expertstore;

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

grpc::Status ExpertdService::Attach(grpc::ServerContext*, const AttachRequest* req, AttachReply* rep) {
  auto s = store_->OpenSession(req->pid());
  if (!s.ok()) return ToGrpc(s.status());
  channel_->Expect(s->index, s->token);
  const auto& h = store_->table().header();
  rep->set_session(s->index);
  rep->set_token(s->token);
  rep->set_session_socket(channel_->path());
  rep->set_control_bytes(store_->control_region().size());
  rep->set_arena_bytes(store_->arena_region().size());
  rep->set_shm_version(h.version);
  rep->set_model_id(h.model_id);
  rep->set_num_layers(h.num_layers);
  rep->set_num_experts(h.num_experts);
  return grpc::Status::OK;
}

grpc::Status ExpertdService::Detach(grpc::ServerContext*, const DetachRequest* req, DetachReply*) {
  if (auto s = store_->CheckSession(req->session(), req->token()); !s.ok()) return ToGrpc(s);
  store_->CloseSession(req->session());
  return grpc::Status::OK;
}

grpc::Status ExpertdService::FetchExperts(grpc::ServerContext*, const FetchRequest* req,
                                          grpc::ServerWriter<FetchReply>* writer) {
  if (auto s = store_->CheckSession(req->session(), req->token()); !s.ok()) return ToGrpc(s);
  if (req->layer() >= store_->table().num_layers())
    return ToGrpc(absl::InvalidArgumentError(absl::StrCat("invalid layer ", req->layer(), ": the model has ",
                                                          store_->table().num_layers(), " layers")));
  // A layer has num_experts experts: a longer list (a client bug, or a hostile one asking for
  // millions of leases in one call) is refused whole, before anything is leased.
  if (static_cast<uint64_t>(req->experts_size()) > store_->table().num_experts())
    return ToGrpc(absl::InvalidArgumentError(absl::StrCat(req->experts_size(), " experts in one fetch: a layer has ",
                                                          store_->table().num_experts())));
  std::vector<int> ids(req->experts().begin(), req->experts().end());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (req->experts(int(i)) > 65535) ids[i] = -1;  // rejected by the store as invalid
  }
  // One message per batch the store reports (the resident ones, then each
  // read as it lands). Once the worker is gone (a write fails), the leases
  // granted for it are dropped here: nobody would ever release them.
  bool client_gone = false;
  const auto t0 = std::chrono::steady_clock::now();
  store_->FetchEach(req->session(), static_cast<int>(req->layer()), ids,
                    [&](std::span<const std::pair<size_t, absl::StatusOr<uint32_t>>> done) {
                      FetchReply rep;
                      rep.set_layer(req->layer());
                      rep.set_server_wait_ns(static_cast<uint64_t>(
                          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
                              .count()));
                      for (const auto& [i, r] : done) {
                        SlabHandle* h = rep.add_slabs();
                        h->set_index(static_cast<uint32_t>(i));
                        h->set_expert(req->experts(int(i)));
                        if (!r.ok()) {
                          h->set_error_code(static_cast<int>(r.status().code()));
                          h->set_error(std::string(r.status().message()));
                          continue;
                        }
                        Lease l;
                        store_->table().Describe(*r, &l);
                        h->set_slab(l.slab);
                        h->set_arena_offset(store_->table().slab(l.slab).arena_offset);
                        h->set_length(l.length);
                        h->set_generation(l.gen);
                        for (uint32_t p = 0; p < l.num_parts; ++p) h->add_part_offsets(l.part_offsets[p]);
                      }
                      if (!client_gone && writer->Write(rep)) return;
                      client_gone = true;
                      for (const auto& [i, r] : done)
                        if (r.ok()) store_->ReleaseUndelivered(req->session(), req->token(), *r);
                    },
                    req->prefill() ? ExpertStore::FetchUse::kPrefill : ExpertStore::FetchUse::kDecode);
  if (client_gone) return grpc::Status(grpc::StatusCode::CANCELLED, "expertd: the worker left the fetch");
  return grpc::Status::OK;
}

grpc::Status ExpertdService::Hint(grpc::ServerContext*, const HintRequest* req, HintReply* rep) {
  if (auto s = store_->CheckSession(req->session(), req->token()); !s.ok()) return ToGrpc(s);
  uint32_t started = 0;
  // Current-token routing first (certain, filled like demand), then the
  // look-ahead predictions (speculative, admission-gated, capped).
  for (bool lookahead : {false, true}) {
    for (const auto& h : req->hints()) {
      if ((h.source() == LayerHint::LOOKAHEAD) != lookahead) continue;
      if (h.layer() >= store_->table().num_layers()) continue;
      std::vector<int> ids;
      for (uint32_t e : h.experts())
        if (e < store_->table().num_experts()) ids.push_back(static_cast<int>(e));
      started += static_cast<uint32_t>(store_->Hint(static_cast<int>(h.layer()), ids, lookahead));
    }
  }
  rep->set_reads_started(started);
  return grpc::Status::OK;
}

void FillStats(ExpertStore& store, StatsReply* rep) {
  StoreStats s = store.Stats();
  rep->set_model_id(store.table().header().model_id);
  for (int t = 0; t < kNumTiers; ++t) {
    auto* ts = rep->add_tiers();
    ts->set_tier(TierName(static_cast<TierId>(t)));
    ts->set_hits(s.tier[t].hits);
    ts->set_bytes(s.tier[t].bytes);
  }
  rep->set_requests(s.requests);
  rep->set_joined_inflight(s.joined_inflight);
  rep->set_shm_hits(s.shm_hits);
  rep->set_evictions(s.evictions);
  rep->set_read_errors(s.read_errors);
  rep->set_prefetch_issued(s.prefetch_issued);
  rep->set_prefetch_used(s.prefetch_used);
  rep->set_prefetch_refused(s.prefetch_refused);
  rep->set_slabs_total(s.slabs_total);
  rep->set_slabs_active(s.slabs_active);
  rep->set_slabs_ready(s.slabs_ready);
  rep->set_slabs_filling(s.slabs_filling);
  rep->set_slabs_leased(s.slabs_leased);
  rep->set_arena_bytes(s.arena_bytes);
  rep->set_budget_bytes(s.budget_bytes);
  rep->set_resident_bytes(s.resident_bytes);
  rep->set_sessions(s.sessions);
  rep->set_io_engine(s.io_engine);
  rep->set_queue_depth(static_cast<uint32_t>(s.queue_depth));
  rep->set_io_inflight(s.io_inflight);
  rep->set_read_gbps(s.read_gbps);
  rep->set_prefetch_promoted(s.prefetch_promoted);
  rep->set_prefetch_gated(s.prefetch_gated);
  rep->set_lookahead_kept(s.lookahead_kept);
  rep->set_prefetch_gate_open(s.prefetch_gate_open);
  rep->set_prefetch_precision(s.prefetch_precision);
  rep->set_demand_busy(s.demand_busy);
  rep->set_prefill_requests(s.prefill_requests);
  rep->set_prefill_fills(s.prefill_fills);
  rep->set_prefill_decode_evictions(s.prefill_decode_evictions);
  rep->set_policy(s.policy);
  for (double w : s.policy_weights) rep->add_policy_weights(w);
  rep->set_policy_horizon_tokens(s.policy_horizon_tokens);
}

grpc::Status ExpertdService::Stats(grpc::ServerContext*, const StatsRequest*, StatsReply* rep) {
  FillStats(*store_, rep);
  return grpc::Status::OK;
}

grpc::Status ExpertdService::Heat(grpc::ServerContext*, const HeatRequest*, HeatReply* rep) {
  auto heat = store_->Heat();
  rep->set_num_layers(store_->table().num_layers());
  rep->set_num_experts(store_->table().num_experts());
  for (const auto& h : heat) {
    rep->add_heat(h.heat);
    rep->add_placement((h.resident ? 1u : 0u) | (h.filling ? 2u : 0u) | (h.pinned ? 4u : 0u));
    rep->add_leases(h.leases);
  }
  return grpc::Status::OK;
}

grpc::Status ExpertdService::Pin(grpc::ServerContext*, const PinRequest* req, PinReply*) {
  return ToGrpc(store_->Pin(static_cast<int>(req->layer()), static_cast<int>(req->expert()), req->pinned()));
}

grpc::Status ExpertdService::SetBudget(grpc::ServerContext*, const SetBudgetRequest* req, SetBudgetReply* rep) {
  auto b = store_->SetBudget(req->bytes());
  if (!b.ok()) return ToGrpc(b.status());
  rep->set_active_bytes(*b);
  return grpc::Status::OK;
}

}  // namespace moe::expertd
