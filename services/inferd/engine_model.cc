#include "services/inferd/engine_model.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "services/inferd/engine_identity.h"
#include "services/peer/peer_server.h"
#include "common/format/crc32c.h"
#include "common/model/pass_memory.h"
#include "common/model/spec_mtp.h"

namespace moe::inferd {

namespace {

class EngineState final : public SeqState {
 public:
  explicit EngineState(KvCache c) : cache(std::move(c)) {}
  int64_t length() const override { return cache.length(); }
  int64_t bytes() const override { return cache.Bytes() + (mtp ? mtp->Bytes() : 0); }
  KvCache cache;
  std::optional<MtpDrafter> mtp;  // with MTP drafts on
};

}  // namespace

absl::StatusOr<std::unique_ptr<EngineModel>> EngineModel::Open(const std::string& model_dir, const EngineConfig& cfg,
                                                               int64_t max_context) {
  auto m = std::unique_ptr<EngineModel>(new EngineModel());
  MOE_ASSIGN_OR_RETURN(m->engine_, Engine::Open(model_dir, cfg));
  const int64_t model_max = m->engine_->config().max_position_embeddings;
  m->max_context_ = max_context > 0 ? std::min(max_context, model_max) : model_max;
  if (m->max_context_ <= 1) {
    return absl::InvalidArgumentError(absl::StrCat(model_dir, ": max_position_embeddings is ", model_max));
  }
  std::string dir = model_dir;
  while (!dir.empty() && dir.back() == '/') dir.pop_back();
  m->name_ = dir.substr(dir.find_last_of('/') == std::string::npos ? 0 : dir.find_last_of('/') + 1);
  m->model_dir_ = model_dir;
  m->cfg_ = cfg;
  m->cfg_.expert_source = nullptr;  // only the options that shape KV values are kept (identity)
  return m;
}

EngineModel::~EngineModel() {
  if (peer_) {
    engine_->mutable_model().set_remote_experts(nullptr);
    peer_.reset();
  }
}

void EngineModel::set_peer_node(std::unique_ptr<peer::PeerNode> node) { peer_ = std::move(node); }

SequenceModel::PeerCounters EngineModel::peer_counters() const {
  PeerCounters c;
  if (!peer_) return c;
  if (peer_->client() != nullptr) {
    const peer::PeerClientStats s = peer_->client()->stats();
    c.remote_jobs = s.remote_jobs;
    c.fallback_jobs = s.fallback_jobs;
    c.failed_calls = s.failed_calls;
    c.bytes_sent = s.bytes_sent;
    c.bytes_received = s.bytes_received;
  }
  if (peer_->service() != nullptr) {
    const peer::PeerServerStats s = peer_->service()->stats();
    c.served_jobs = s.jobs;
    c.refused_calls = s.refused;
  }
  return c;
}

absl::StatusOr<std::string> EngineModel::WeightsIdentity() const {
  std::call_once(weights_once_, [&] { weights_ = inferd::WeightsIdentity(model_dir_); });
  return weights_;
}

absl::StatusOr<std::string> EngineModel::StateIdentity() const {
  std::call_once(identity_once_, [&] {
    absl::StatusOr<std::string> w = WeightsIdentity();
    identity_ = w.ok() ? EngineStateIdentity(model_dir_, *w, cfg_, *engine_) : w;
  });
  return identity_;
}

// A state on disk: the KV cache's own file bytes, or (with an MTP drafter
// that covers the state) a frame that adds the drafter's hidden rows and MTP
// cache, so a resumed sequence drafts at once:
//   "MOESEQ02" | u64 kv_len | kv bytes | u64 hidden floats | f32 x that | u64 mtp_len | mtp bytes | crc32c (masked)
// A bare KV file (the older form, or a state without a drafter) still parses.
namespace {
constexpr char kSeqMagic[8] = {'M', 'O', 'E', 'S', 'E', 'Q', '0', '2'};

void PutU64(std::string& s, uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }
bool GetU64(std::string_view b, size_t& off, uint64_t* v) {
  if (b.size() - off < 8) return false;
  std::memcpy(v, b.data() + off, 8);
  off += 8;
  return true;
}

// A parsed cache has `want`'s layout (layers, dtype, index-key format, row
// widths, which layers keep index keys) and every layer the same length.
bool SameLayout(const KvCache& c, const KvCache& want) {
  bool same = c.num_layers() == want.num_layers() && c.dtype() == want.dtype() && c.index_q8() == want.index_q8();
  for (auto s : {KvCache::kLatent, KvCache::kRope, KvCache::kIndexKey}) same = same && c.width(s) == want.width(s);
  for (int l = 0; same && l < c.num_layers(); ++l) {
    same = c.has_index_key(l) == want.has_index_key(l) && c.length(l) == c.length();
  }
  return same;
}
}  // namespace

absl::StatusOr<std::string> EngineModel::SerializeState(const SeqState& state) const {
  const auto& s = static_cast<const EngineState&>(state);
  std::string kv = s.cache.Serialize();
  const int64_t H = engine_->config().hidden_size;
  if (!s.mtp || s.mtp->stale() || static_cast<int64_t>(s.mtp->hidden().size()) != s.cache.length() * H) return kv;
  std::string mtp = s.mtp->cache().Serialize();
  std::string out(kSeqMagic, 8);
  PutU64(out, kv.size());
  out += kv;
  PutU64(out, s.mtp->hidden().size());
  out.append(reinterpret_cast<const char*>(s.mtp->hidden().data()), s.mtp->hidden().size() * sizeof(float));
  PutU64(out, mtp.size());
  out += mtp;
  const uint32_t crc = crc32c::Mask(crc32c::Value(out.data(), out.size()));
  out.append(reinterpret_cast<const char*>(&crc), 4);
  return out;
}

absl::StatusOr<std::unique_ptr<SeqState>> EngineModel::ParseState(std::string_view bytes,
                                                                   const std::string& label) const {
  std::string_view kv_bytes = bytes, mtp_bytes;
  std::vector<float> hidden;
  const bool framed = bytes.size() >= 8 && std::memcmp(bytes.data(), kSeqMagic, 8) == 0;
  if (framed) {
    auto bad = [&](const char* why) { return absl::DataLossError(absl::StrCat(label, ": ", why)); };
    if (bytes.size() < 8 + 4) return bad("truncated state");
    uint32_t crc;
    std::memcpy(&crc, bytes.data() + bytes.size() - 4, 4);
    if (crc32c::Mask(crc32c::Value(bytes.data(), bytes.size() - 4)) != crc) return bad("state checksum mismatch");
    const std::string_view b = bytes.substr(0, bytes.size() - 4);
    size_t off = 8;
    uint64_t n = 0;
    if (!GetU64(b, off, &n) || n > b.size() - off) return bad("truncated KV section");
    kv_bytes = b.substr(off, n);
    off += n;
    if (!GetU64(b, off, &n) || n > (b.size() - off) / sizeof(float)) return bad("truncated hidden-state section");
    hidden.resize(n);
    std::memcpy(hidden.data(), b.data() + off, n * sizeof(float));
    off += n * sizeof(float);
    if (!GetU64(b, off, &n) || n != b.size() - off) return bad("bad MTP cache section");
    mtp_bytes = b.substr(off, n);
  }
  MOE_ASSIGN_OR_RETURN(KvCache c, KvCache::Parse(kv_bytes, label));
  // The identity already says which model wrote it; the layout is checked anyway.
  if (!SameLayout(c, engine_->NewCache())) {
    return absl::FailedPreconditionError(absl::StrCat(label, ": KV layout differs from this model's"));
  }
  if (static_cast<int64_t>(c.tokens().size()) != c.length()) {
    return absl::DataLossError(absl::StrCat(label, ": ", c.tokens().size(), " token ids for ", c.length(), " KV rows"));
  }
  c.set_pending_token(-1);
  auto out = std::make_unique<EngineState>(std::move(c));
  if (mtp_drafts_) {
    out->mtp.emplace(engine_->model(), out->cache.dtype(), engine_->index_q8());
    const int64_t H = engine_->config().hidden_size;
    bool restored = false;
    if (framed && static_cast<int64_t>(hidden.size()) == out->cache.length() * H) {
      auto m = KvCache::Parse(mtp_bytes, label + " (MTP cache)");
      if (m.ok() && SameLayout(*m, out->mtp->cache()) && m->length() <= out->cache.length()) {
        out->mtp->Restore(std::move(*m), std::move(hidden));
        restored = true;
      }
    }
    if (!restored) out->mtp->MarkStale();  // as for a prefix copy: no hidden states for the loaded prefix
  }
  return out;
}

std::unique_ptr<SeqState> EngineModel::NewState() {
  auto s = std::make_unique<EngineState>(engine_->NewCache());
  if (mtp_drafts_) s->mtp.emplace(engine_->model(), s->cache.dtype(), engine_->index_q8());
  return s;
}

absl::Status EngineModel::set_mtp_drafts(bool on) {
  if (on && !engine_->model().has_mtp()) {
    return absl::InvalidArgumentError(absl::StrCat(name_, " has no MTP layer (loaded): no MTP drafts"));
  }
  mtp_drafts_ = on;
  return absl::OkStatus();
}

absl::Status EngineModel::Truncate(SeqState& state, int64_t n) {
  auto& s = static_cast<EngineState&>(state);
  if (n < 0 || n > s.cache.length()) return absl::InvalidArgumentError("truncate beyond the cached tokens");
  s.cache.Truncate(n);
  if (s.mtp) s.mtp->Truncate(n);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> EngineModel::DraftMtp(SeqState& state, std::span<const int32_t> tokens,
                                                           int32_t next, int k) {
  auto& s = static_cast<EngineState&>(state);
  if (!s.mtp) return std::vector<int32_t>{};
  return s.mtp->Draft(tokens, next, k);
}

int64_t EngineModel::MtpBehind(const SeqState& state) const {
  const auto& s = static_cast<const EngineState&>(state);
  return s.mtp ? std::max<int64_t>(0, s.cache.length() - s.mtp->cache().length()) : 0;
}

absl::StatusOr<std::unique_ptr<SeqState>> EngineModel::Clone(const SeqState& state, int64_t n) {
  const auto& src = static_cast<const EngineState&>(state);
  if (n < 0 || n > src.length()) return absl::InvalidArgumentError("clone beyond the cached tokens");
  KvCache copy = src.cache;
  copy.Truncate(n);
  if (static_cast<int64_t>(copy.tokens().size()) > n) copy.tokens().resize(n);
  copy.set_pending_token(-1);
  auto out = std::make_unique<EngineState>(std::move(copy));
  if (src.mtp) {
    out->mtp = src.mtp;
    out->mtp->Truncate(n);
  } else if (mtp_drafts_) {
    out->mtp.emplace(engine_->model(), out->cache.dtype(), engine_->index_q8());
    out->mtp->MarkStale();  // no hidden states for the copied prefix
  }
  return out;
}

std::vector<BatchSeq> EngineModel::ToBatch(std::span<const Item> items) const {
  std::vector<BatchSeq> batch(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    batch[i].ids = items[i].tokens;
    batch[i].cache = &static_cast<EngineState*>(items[i].state)->cache;
    batch[i].all_rows = items[i].logits != nullptr && items[i].logit_rows > 1;
    batch[i].logits = items[i].logits != nullptr;
    batch[i].all_hidden = mtp_drafts_;
    batch[i].prefill = items[i].prefill;
  }
  return batch;
}

absl::Status EngineModel::Deliver(std::span<const Item> items, std::span<const BatchSeq> batch,
                                  std::span<const int64_t> p0, std::vector<ForwardResult>& r) {
  const int64_t V = vocab_size();
  for (size_t i = 0; i < items.size(); ++i) {
    auto* st = static_cast<EngineState*>(items[i].state);
    if (st->mtp) st->mtp->AddHidden(p0[i], r[i].hidden);
    if (!items[i].logits) continue;
    const int64_t R = batch[i].all_rows ? items[i].logit_rows : 1;
    if (r[i].rows < R || static_cast<int64_t>(r[i].logits.size()) < r[i].rows * V) {
      return absl::InternalError("engine returned fewer logits rows than asked");
    }
    std::memcpy(items[i].logits, r[i].logits.data() + (r[i].rows - R) * V, sizeof(float) * V * R);
  }
  return absl::OkStatus();
}

absl::Status EngineModel::Forward(std::span<Item> items) {
  if (items.empty()) return absl::OkStatus();
  std::vector<BatchSeq> batch = ToBatch(items);
  std::vector<int64_t> p0(items.size());
  for (size_t i = 0; i < items.size(); ++i) p0[i] = batch[i].cache->length();
  // One forward over every item's rows: each weight matrix and each distinct
  // routed expert is read once for the whole step.
  std::vector<ForwardResult> r;
  if (batched_forward_) {
    MOE_ASSIGN_OR_RETURN(r, engine_->model().ForwardBatch(batch));
  } else {
    for (const BatchSeq& b : batch) {
      MOE_ASSIGN_OR_RETURN(std::vector<ForwardResult> one, engine_->model().ForwardBatch(std::span(&b, 1)));
      r.push_back(std::move(one[0]));
    }
  }
  return Deliver(items, batch, p0, r);
}

namespace {

class EnginePass final : public SequenceModel::Pass {
 public:
  bool layers_done() const override { return fp->layers_done(); }
  std::unique_ptr<ForwardPass> fp;
  std::vector<SequenceModel::Item> items;
  std::vector<BatchSeq> batch;  // ids: the items' spans (the batcher keeps them alive)
  std::vector<int64_t> p0;
};

}  // namespace

int64_t EngineModel::kv_bytes_per_token() const {
  if (kv_per_token_ <= 0 || !mtp_drafts_) return kv_per_token_;
  // The MTP drafter's rows are part of every sequence's state: admission counts them against the plan's KV.
  return kv_per_token_ + MtpBytesPerToken(engine_->config(), cfg_.kv_dtype, engine_->index_q8());
}

int64_t EngineModel::default_pass_bytes() const {
  return planned_pass_bytes_ > 0 ? planned_pass_bytes_ : kDefaultPrefillPassBytes;
}

int64_t EngineModel::pass_rows_for_bytes(int64_t budget_bytes) const {
  return PassRowsForBudget(engine_->config(), budget_bytes);
}

absl::StatusOr<std::unique_ptr<SequenceModel::Pass>> EngineModel::BeginPass(std::span<const Item> items) {
  if (items.empty()) return absl::InvalidArgumentError("pass: no items");
  auto p = std::make_unique<EnginePass>();
  p->items.assign(items.begin(), items.end());
  p->batch = ToBatch(items);
  for (const BatchSeq& b : p->batch) p->p0.push_back(b.cache->length());
  MOE_ASSIGN_OR_RETURN(p->fp, engine_->model().BeginPass(p->batch));
  return p;
}

absl::Status EngineModel::AdvancePass(Pass& pass, int layers) {
  return engine_->model().AdvancePass(*static_cast<EnginePass&>(pass).fp, layers);
}

absl::Status EngineModel::FinishPass(Pass& pass) {
  auto& p = static_cast<EnginePass&>(pass);
  MOE_ASSIGN_OR_RETURN(std::vector<ForwardResult> r, engine_->model().FinishPass(*p.fp));
  return Deliver(p.items, p.batch, p.p0, r);
}

int64_t EngineModel::expert_fetches() const { return engine_->expert_source().Stats().gets; }

double EngineModel::expert_hit_rate() const { return engine_->expert_source().Stats().HitRate(); }

}  // namespace moe::inferd
