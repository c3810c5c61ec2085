#include "common/expertstore/store.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/base/aligned_buffer.h"
#include "common/base/log.h"
#include "common/base/status.h"
#include "common/format/crc32c.h"
#include "common/format/slab_layout.h"

namespace moe::expertstore {

struct FillState {
  uint64_t tag = 0;  // ReadOp::tag of its disk read
  // A fetch joined this look-ahead fill: its reads are demand reads. Set
  // before IoEngine::Promote; StartReads re-checks it after Submit, so a
  // promotion racing with the submission is not lost.
  std::atomic<bool> promoted{false};
  bool done = false;
  absl::Status status;
};

namespace {
uint64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
std::string Mib(uint64_t b) {
  return b >= (16ull << 20) ? absl::StrCat(b >> 20, " MiB") : absl::StrCat(b >> 10, " KiB");
}
}  // namespace

absl::StatusOr<std::unique_ptr<ExpertStore>> ExpertStore::Create(std::unique_ptr<RecordLocator> locator,
                                                                 const StoreConfig& config) {
  auto st = std::unique_ptr<ExpertStore>(new ExpertStore());
  st->cfg_ = config;
  const int L = locator->num_layers(), E = locator->num_experts();
  // 1-2. Record sizes -> size classes -> slabs per class (common/format/slab_layout.h: the
  // serving plan sizes expertd's budget with the same rule).
  std::map<uint64_t, uint64_t> lengths;  // record length -> records
  for (int l = 0; l < L; ++l) {
    for (int e = 0; e < E; ++e) {
      auto loc = locator->Locate(l, e);
      if (absl::IsNotFound(loc.status())) continue;
      if (!loc.ok()) return loc.status();
      ++lengths[loc->length];
    }
  }
  MOE_ASSIGN_OR_RETURN(SlabLayout slabs, LayOutSlabs(lengths, config.top_k, config.budget_bytes));
  ShmGeometry g;
  g.num_layers = static_cast<uint32_t>(L);
  g.num_experts = static_cast<uint32_t>(E);
  g.max_sessions = config.max_sessions;
  g.model_id = locator->model_id();
  for (const SlabClass& c : slabs.classes) {
    g.classes.push_back({c.slab_bytes, static_cast<uint32_t>(c.slabs)});
    st->class_bytes_.push_back(c.slab_bytes);
  }
  // 3. Shared memory.
  MOE_ASSIGN_OR_RETURN(st->ctl_, ShmRegion::Create("moestream-expertd-ctl", AlignUp(g.control_bytes(), 4096), true));
  MOE_ASSIGN_OR_RETURN(st->arena_, ShmRegion::Create("moestream-expertd-arena", g.arena_bytes(), config.populate,
                                                          config.huge_pages));
  MOE_ASSIGN_OR_RETURN(st->table_, ExpertTable::Format(st->ctl_.data(), st->ctl_.size(), st->arena_.data(),
                                                       st->arena_.size(), g));
  st->priv_.resize(st->table_.num_slabs());
  // 4. Files.
  st->files_ = locator->files();
  for (const auto& f : st->files_) {
    int dfd = ::open(f.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (dfd < 0 && errno == EINVAL) {
      MOE_LOG(WARNING) << f << ": O_DIRECT not supported by this file system; reading buffered";
      dfd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    }
    if (dfd < 0) return absl::NotFoundError(absl::StrCat("expert shard ", f, ": ", strerror(errno)));
    st->direct_fds_.push_back(dfd);
    // The buffered fd serves only the page-cache tier, which reads a record buffered once it is
    // known to be cached (see page_cache_probe.h: a buffered try on a miss would read it twice),
    // and never reads ahead.
    const int bfd = config.page_cache_tier ? ::open(f.c_str(), O_RDONLY | O_CLOEXEC) : -1;
    st->buffered_fds_.push_back(bfd);
    std::unique_ptr<PageCacheProbe> probe;
    if (bfd >= 0) {
      ::posix_fadvise(bfd, 0, 0, POSIX_FADV_RANDOM);
      auto p = PageCacheProbe::Open(bfd);
      if (p.ok()) {
        probe = std::move(*p);
      } else {
        MOE_LOG(WARNING) << f << ": page-cache tier off for this shard (" << p.status().message() << ")";
      }
    }
    st->cache_probes_.push_back(std::move(probe));
  }
  // 5. IO engine, registered buffers (one per slab) where allowed.
  MOE_ASSIGN_OR_RETURN(st->io_, MakeIoEngine(config.io));
  if (config.io.register_buffers && st->table_.num_slabs() <= 16384) {
    std::vector<iovec> iov(st->table_.num_slabs());
    for (uint32_t s = 0; s < iov.size(); ++s) iov[s] = {st->table_.slab_data(s), st->table_.slab(s).capacity};
    if (auto r = st->io_->RegisterBuffers(iov); !r.ok()) {
      MOE_LOG(INFO) << "io: buffers not registered (" << r.message() << "); plain reads";
    }
  }
  // 6. Policy and persisted heat.
  PolicyConfig pc = config.policy;
  if (pc.accesses_per_token <= 0) {
    uint32_t moe_layers = 0;
    for (int l = 0; l < L; ++l) moe_layers += absl::IsNotFound(locator->Locate(l, 0).status()) ? 0 : 1;
    pc.accesses_per_token = double(std::max<uint32_t>(moe_layers, 1)) * config.top_k;
  }
  st->policy_ = HeatPolicy(g.num_layers, g.num_experts, pc);
  st->hit_tail_.assign(g.max_sessions, 0);
  st->gate_ = PrefetchGate(config.prefetch_gate);
  if (!config.heat_file.empty() && ::access(config.heat_file.c_str(), F_OK) == 0) {
    if (auto r = st->policy_.Load(config.heat_file, g.model_id); !r.ok()) {
      MOE_LOG(WARNING) << "ignoring heat file: " << r.message();
    } else {
      MOE_LOG(INFO) << "loaded heat from " << config.heat_file;
    }
  }
  st->locator_ = std::move(locator);
  st->stats_.arena_bytes = g.arena_bytes();
  st->stats_.budget_bytes = g.arena_bytes();
  std::string cls;
  for (auto& c : g.classes) absl::StrAppend(&cls, " ", c.num_slabs, "x", Mib(c.slab_bytes));
  uint64_t num_records = 0;
  for (const SlabClass& c : slabs.classes) num_records += c.records;
  MOE_LOG(INFO) << "expert store: " << num_records << " records, arena " << Mib(g.arena_bytes()) << " in"
                << cls << ", io " << st->io_->name() << " qd " << st->io_->queue_depth();
  return st;
}

ExpertStore::~ExpertStore() {
  io_.reset();  // waits for in-flight reads (their callbacks take mu_)
  if (!cfg_.heat_file.empty()) {
    if (auto s = SaveHeat(); !s.ok()) {
      MOE_LOG(WARNING) << s.message();
    }
  }
  for (int fd : direct_fds_) ::close(fd);
  for (int fd : buffered_fds_)
    if (fd >= 0) ::close(fd);
}

uint32_t ExpertStore::ClassOf(uint64_t length) const {
  uint64_t a = AlignUp(length, kSlabAlign);
  // Classes are sorted by size, largest first; pick the smallest that fits.
  uint32_t best = 0;
  for (uint32_t c = 0; c < class_bytes_.size(); ++c)
    if (class_bytes_[c] >= a) best = c;
  return best;
}

absl::StatusOr<ExpertStore::Session> ExpertStore::OpenSession(uint32_t pid) {
  std::lock_guard<std::mutex> l(mu_);
  static thread_local std::mt19937_64 rng(std::random_device{}());
  for (uint32_t s = 0; s < table_.max_sessions(); ++s) {
    auto& h = table_.session(s);
    if (h.state.load() != kSessionFree) continue;
    uint64_t token = rng() | 1;
    auto* cnt = table_.session_counts(s);
    for (uint32_t i = 0; i < table_.num_slabs(); ++i) cnt[i].store(0);
    h.pid = pid;
    h.token.store(token);
    h.shm_hits.store(0);
    h.shm_misses.store(0);
    h.state.store(kSessionAttached, std::memory_order_release);
    stats_.sessions++;
    return Session{s, token};
  }
  return absl::ResourceExhaustedError(absl::StrCat("expertd: all ", table_.max_sessions(),
                                                   " worker sessions are in use (--max-sessions)"));
}

absl::Status ExpertStore::CheckSession(uint32_t index, uint64_t token) const {
  if (index >= table_.max_sessions() || table_.session(index).state.load() != kSessionAttached ||
      table_.session(index).token.load() != token)
    return absl::FailedPreconditionError(absl::StrCat("expertd: session ", index, " is not attached (detached, "
                                                      "reclaimed after the worker's socket closed, or bad token)"));
  return absl::OkStatus();
}

void ExpertStore::CloseSession(uint32_t index) {
  std::lock_guard<std::mutex> l(mu_);
  if (index >= table_.max_sessions() || table_.session(index).state.load() == kSessionFree) return;
  stats_.shm_hits += table_.session(index).shm_hits.load();
  DrainHitLogLocked(index);
  table_.ReclaimSession(index);
  hit_tail_[index] = 0;
  stats_.sessions--;
  cv_.notify_all();
}

int64_t ExpertStore::AllocateLocked(uint32_t cls, uint32_t key, bool speculative, double precision) {
  const auto& c = table_.header().classes[cls];
  for (uint32_t s = c.first_slab; s < c.first_slab + c.num_slabs; ++s) {
    uint32_t state = CtlState(table_.slab(s).ctl.load(std::memory_order_relaxed));
    if (state == kSlabFree && !priv_[s].to_disable) {
      policy_.Filled(key);
      return s;
    }
  }
  if (precision < 0) precision = cfg_.prefetch_gate.weigh_admission ? gate_.precision() : 1.0;
  // The policy offers its resident keys coldest first (HeatPolicy::EvictFirst,
  // the order the replay measures); a key of another size class, filling,
  // claimed or leased is passed over. Admission: a hint never evicts a key
  // hotter than what it brings; the offers come coldest first, so the rest
  // are hotter too.
  const uint32_t num_experts = table_.num_experts();
  int64_t slab = -1;
  policy_.EvictFirst([&](uint32_t pk, double score) {
    const auto& e = table_.entry(int(pk / num_experts), int(pk % num_experts));
    const uint32_t sp1 = e.slab_plus1.load(std::memory_order_relaxed);
    if (sp1 == 0) return HeatPolicy::Offer::kBusy;
    const uint32_t s = sp1 - 1;
    if (s < c.first_slab || s >= c.first_slab + c.num_slabs) return HeatPolicy::Offer::kBusy;
    if (CtlState(table_.slab(s).ctl.load(std::memory_order_relaxed)) != kSlabReady || priv_[s].claims != 0)
      return HeatPolicy::Offer::kBusy;
    if (!policy_.Admits(key, speculative, score, precision)) return HeatPolicy::Offer::kStop;
    if (!table_.TryEvict(s)) return HeatPolicy::Offer::kBusy;  // leased
    slab = s;
    return HeatPolicy::Offer::kTaken;
  });
  if (slab < 0) return -1;
  policy_.Filled(key);
  stats_.evictions++;
  priv_[slab].prefetched = false;
  return slab;
}

int64_t ExpertStore::AllocatePrefillLocked(uint32_t cls, uint32_t key) {
  const auto& c = table_.header().classes[cls];
  uint32_t held = 0;  // slabs of the class holding prefill fills
  for (uint32_t s = c.first_slab; s < c.first_slab + c.num_slabs; ++s) {
    const uint32_t state = CtlState(table_.slab(s).ctl.load(std::memory_order_relaxed));
    if (state == kSlabFree && !priv_[s].to_disable) {
      policy_.Filled(key);
      return s;
    }
    if (!priv_[s].prefill) continue;
    ++held;
    if (state != kSlabReady || priv_[s].claims != 0) continue;
    const uint32_t old_key = table_.slab(s).key.load(std::memory_order_relaxed);
    const uint32_t pk = policy_.index(KeyLayer(old_key), KeyExpert(old_key));
    if (policy_.pinned(pk) || !table_.TryEvict(s)) continue;  // leased
    policy_.Evicted(pk);
    policy_.Filled(key);
    stats_.evictions++;
    priv_[s].prefetched = false;
    return s;
  }
  // Only keys colder than this one is now...
  int64_t s = AllocateLocked(cls, key, /*speculative=*/true, /*precision=*/0.0);
  // ...else the coldest, while the prefill holds fewer than top_k slabs.
  if (s < 0 && held < std::max<uint32_t>(1, cfg_.top_k)) {
    s = AllocateLocked(cls, key, /*speculative=*/false);
    if (s >= 0) stats_.prefill_decode_evictions++;
  }
  return s;
}

std::vector<absl::StatusOr<uint32_t>> ExpertStore::Fetch(uint32_t session, int layer, const std::vector<int>& ids,
                                                         FetchUse use) {
  std::vector<absl::StatusOr<uint32_t>> out(ids.size(), absl::UnknownError("not fetched"));
  FetchEach(
      session, layer, ids,
      [&](std::span<const std::pair<size_t, absl::StatusOr<uint32_t>>> done) {
        for (const auto& [i, r] : done) out[i] = r;
      },
      use);
  return out;
}

void ExpertStore::FetchEach(uint32_t session, int layer, const std::vector<int>& ids, const FetchReady& ready,
                            FetchUse use) {
  const bool prefill = use == FetchUse::kPrefill;
  using Result = std::pair<size_t, absl::StatusOr<uint32_t>>;
  std::vector<Result> now;                   // results not yet reported
  std::vector<int> pending(ids.size(), -1);  // slab index we wait on
  std::vector<std::shared_ptr<FillState>> fills(ids.size());
  std::vector<StartRead> reads;
  std::unique_lock<std::mutex> lk(mu_);
  // Reports `now` without the lock (the caller may write to a socket).
  auto flush = [&] {
    if (now.empty()) return;
    std::vector<Result> batch = std::move(now);
    now.clear();
    lk.unlock();
    ready(batch);
    lk.lock();
  };
  if (session >= table_.max_sessions() || table_.session(session).state.load() != kSessionAttached) {
    for (size_t i = 0; i < ids.size(); ++i)
      now.push_back({i, absl::FailedPreconditionError("expertd: session is not attached")});
    flush();
    return;
  }
  HarvestLocked();
  // The session may be closed (worker died) while we wait for reads; leases
  // are only granted while it is still the same attached session.
  const uint64_t token = table_.session(session).token.load();
  auto still_attached = [&] {
    return table_.session(session).state.load() == kSessionAttached && table_.session(session).token.load() == token;
  };
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(cfg_.wait_ms);
  bool waited = false;  // this call counts in fetches_waiting_ (the prefetch gate's u)
  auto begin_wait = [&] {
    if (!waited) DemandWaitLocked(true);
    waited = true;
  };
  size_t left = 0;  // ids whose read we wait for
  // Leases every pending id whose read has finished (into `now`).
  auto collect_done = [&] {
    for (size_t i = 0; i < ids.size() && left > 0; ++i) {
      if (pending[i] < 0 || !fills[i]->done) continue;
      const uint32_t s = static_cast<uint32_t>(pending[i]);
      pending[i] = -1;
      --left;
      priv_[s].claims--;
      if (fills[i]->status.ok() && !still_attached()) {
        now.push_back({i, absl::FailedPreconditionError("expertd: session closed while its read was in flight")});
      } else if (fills[i]->status.ok()) {
        table_.LeaseForSession(session, s);
        now.push_back({i, s});
      } else {
        now.push_back({i, fills[i]->status});
      }
    }
  };
  for (size_t i = 0; i < ids.size(); ++i) {
    int id = ids[i];
    auto loc = locator_->Locate(layer, id);
    if (!loc.ok()) {
      now.push_back({i, loc.status()});
      continue;
    }
    stats_.requests++;
    uint32_t pk = policy_.index(layer, id);
    if (prefill) {
      stats_.prefill_requests++;  // a scan: no access, no clock tick
    } else {
      policy_.Touch(pk);
      ObserveRandomResidentLocked();
    }
    for (;;) {
      uint32_t sp1 = table_.entry(layer, id).slab_plus1.load(std::memory_order_relaxed);
      if (sp1 != 0) {
        uint32_t s = sp1 - 1;
        uint32_t state = CtlState(table_.slab(s).ctl.load(std::memory_order_relaxed));
        if (state == kSlabReady) {
          if (!still_attached()) {
            now.push_back({i, absl::FailedPreconditionError("expertd: session closed")});
            break;
          }
          table_.LeaseForSession(session, s);
          stats_.tier[int(TierId::kRam)].hits++;
          stats_.tier[int(TierId::kRam)].bytes += table_.slab(s).length;
          if (!prefill) priv_[s].prefill = false;  // decode uses it: an ordinary slab now
          NoteHintUsedLocked(s);
          now.push_back({i, s});
          break;
        }
        if (state == kSlabFilling) {
          if (!prefill) priv_[s].prefill = false;
          NoteHintUsedLocked(s);
          if (priv_[s].lookahead_fill) {
            // A prediction came true while its read is in flight: its queued
            // chunks become demand reads (lock order store -> engine is safe:
            // engines call back without their own lock held).
            priv_[s].lookahead_fill = false;
            priv_[s].prefetch_fill = false;
            prefetch_inflight_--;
            stats_.prefetch_promoted++;
            priv_[s].fill->promoted.store(true);
            io_->Promote(priv_[s].fill->tag);
          }
          stats_.joined_inflight++;
          priv_[s].claims++;
          pending[i] = static_cast<int>(s);
          fills[i] = priv_[s].fill;
          ++left;
          break;
        }
      }
      int64_t s = prefill ? AllocatePrefillLocked(ClassOf(loc->length), pk) : AllocateLocked(ClassOf(loc->length), pk, false);
      if (s >= 0) {
        ResolveReusedLocked(static_cast<uint32_t>(s));
        table_.BeginFill(static_cast<uint32_t>(s), layer, id);
        auto fill = std::make_shared<FillState>();
        fill->tag = ++next_fill_tag_;
        priv_[s].fill = fill;
        priv_[s].claims = 1;
        priv_[s].prefetched = false;
        priv_[s].prefill = prefill;
        if (prefill) stats_.prefill_fills++;
        pending[i] = static_cast<int>(s);
        fills[i] = fill;
        ++left;
        reads.push_back(StartRead{static_cast<uint32_t>(s), *loc, fill});
        break;
      }
      // Every slab of the class is leased, claimed or filling: start what we
      // have, hand over what is leased (a pipelined worker releases each
      // expert once computed, which frees slabs for the rest), then wait for
      // releases (workers release in shared memory, so poll).
      if (!reads.empty()) {
        lk.unlock();
        StartReads(std::move(reads));
        reads.clear();
        lk.lock();
      }
      collect_done();
      flush();
      begin_wait();
      if (cv_.wait_until(lk, std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(2))) ==
              std::cv_status::timeout &&
          std::chrono::steady_clock::now() >= deadline) {
        now.push_back({i, absl::ResourceExhaustedError(absl::StrCat(
                              "expertd: no free slab for (layer ", layer, ", id ", id, ") within ", cfg_.wait_ms,
                              " ms: every slab of its size class is leased; release leases or raise --budget"))});
        break;
      }
    }
  }
  if (!reads.empty()) {
    lk.unlock();
    StartReads(std::move(reads));
    lk.lock();
  }
  flush();  // the resident ones (and bad ids) while the reads run
  while (left > 0) {
    collect_done();
    if (!now.empty()) {
      flush();
      continue;
    }
    begin_wait();
    cv_.wait(lk);  // OnReadDone notifies
  }
  if (waited) DemandWaitLocked(false);
}

void ExpertStore::ReleaseUndelivered(uint32_t session, uint64_t token, uint32_t slab) {
  std::lock_guard<std::mutex> l(mu_);
  if (session >= table_.max_sessions() || table_.session(session).state.load() != kSessionAttached ||
      table_.session(session).token.load() != token)
    return;
  table_.Release(session, slab);
  cv_.notify_all();
}

void ExpertStore::DemandWaitLocked(bool begin) {
  if (begin ? fetches_waiting_++ == 0 : --fetches_waiting_ == 0) gate_.DemandWaiting(begin, NowNs());
}

void ExpertStore::ResolveReusedLocked(uint32_t slab) {
  SlabPriv& p = priv_[slab];
  if (!p.lookahead_unresolved) return;
  p.lookahead_unresolved = false;
  // A worker may have leased it in shared memory since the last harvest.
  bool used = table_.entry(p.lookahead_layer, p.lookahead_expert).hits.load(std::memory_order_relaxed) != 0;
  gate_.Resolved(used);
}

bool ExpertStore::HasFreeSlabLocked(uint32_t cls) const {
  const auto& c = table_.header().classes[cls];
  for (uint32_t s = c.first_slab; s < c.first_slab + c.num_slabs; ++s)
    if (CtlState(table_.slab(s).ctl.load(std::memory_order_relaxed)) == kSlabFree && !priv_[s].to_disable) return true;
  return false;
}

void ExpertStore::NoteShmUseLocked(int layer, int expert) {
  uint32_t sp1 = table_.entry(layer, expert).slab_plus1.load(std::memory_order_relaxed);
  if (sp1 == 0) return;
  const SlabPriv& p = priv_[sp1 - 1];
  if (p.lookahead_layer == layer && p.lookahead_expert == expert) NoteHintUsedLocked(sp1 - 1);
}

void ExpertStore::NoteHintUsedLocked(uint32_t slab) {
  SlabPriv& p = priv_[slab];
  if (p.prefetched) {
    p.prefetched = false;
    stats_.prefetch_used++;
  }
  if (p.lookahead_unresolved) {
    p.lookahead_unresolved = false;
    gate_.Resolved(true);
  }
}

void ExpertStore::StartReads(std::vector<StartRead> reads) {
  for (auto& r : reads) {
    auto t0 = std::chrono::steady_clock::now();
    uint8_t* dest = table_.slab_data(r.slab);
    uint64_t io_len = AlignUp(r.loc.length, kDirectIoAlign);
    if (cache_probes_[r.loc.file] && cache_probes_[r.loc.file]->Cached(r.loc.offset, r.loc.length)) {
      iovec v{dest, r.loc.length};
      ssize_t n = ::preadv2(buffered_fds_[r.loc.file], &v, 1, static_cast<off_t>(r.loc.offset), RWF_NOWAIT);
      if (n == ssize_t(r.loc.length)) {
        OnReadDone(r.slab, r.loc, r.fill, absl::OkStatus(), TierId::kPageCache, t0);
        continue;
      }
    }
    ReadOp op;
    op.fd = direct_fds_[r.loc.file];
    op.offset = r.loc.offset;
    op.length = r.loc.length;
    op.io_length = io_len;
    op.dest = dest;
    op.buf_index = io_->buffers_registered() ? static_cast<int>(r.slab) : -1;
    op.speculative = r.speculative && !r.fill->promoted.load();
    op.tag = r.fill->tag;
    op.label = absl::StrCat(files_[r.loc.file], " record (layer ", KeyLayer(table_.slab(r.slab).key.load()),
                            ", id ", KeyExpert(table_.slab(r.slab).key.load()), ")");
    uint32_t slab = r.slab;
    RecordLocation loc = r.loc;
    auto fill = r.fill;
    const bool speculative = op.speculative;
    io_->Submit(std::move(op), [this, slab, loc, fill, t0](absl::Status s) {
      OnReadDone(slab, loc, fill, std::move(s), TierId::kDisk, t0);
    });
    if (speculative && fill->promoted.load()) io_->Promote(fill->tag);
  }
}

void ExpertStore::OnReadDone(uint32_t slab, const RecordLocation& loc, std::shared_ptr<FillState> fill,
                             absl::Status s, TierId tier, std::chrono::steady_clock::time_point t0) {
  uint8_t* data = table_.slab_data(slab);
  if (s.ok()) {
    uint32_t crc = crc32c::Extend(0, data, loc.length);
    if (crc != loc.crc32c) {
      s = absl::DataLossError(absl::StrCat("checksum mismatch in ", files_[loc.file], " record at offset ", loc.offset,
                                           " (", loc.length, " bytes): crc32c ", crc, " != expected ", loc.crc32c,
                                           " (corrupt shard)"));
    }
  }
  uint64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard<std::mutex> l(mu_);
  if (s.ok()) {
    table_.Publish(slab, loc.length, loc.crc32c, loc.num_parts, loc.part_offsets, ns);
    stats_.tier[int(tier)].hits++;
    stats_.tier[int(tier)].bytes += loc.length;
    priv_[slab].source = tier;
  } else {
    MOE_LOG(ERROR) << s.message();
    const uint32_t k = table_.slab(slab).key.load(std::memory_order_relaxed);
    if (k != kNoKey) policy_.Removed(policy_.index(KeyLayer(k), KeyExpert(k)));
    table_.Abort(slab);
    stats_.read_errors++;
    priv_[slab].prefetched = false;
    priv_[slab].prefill = false;
    ResolveReusedLocked(slab);
  }
  if (priv_[slab].fill == fill && priv_[slab].prefetch_fill) {
    priv_[slab].prefetch_fill = false;
    prefetch_inflight_--;
  }
  if (priv_[slab].fill == fill) priv_[slab].lookahead_fill = false;
  fill->status = s;
  fill->done = true;
  cv_.notify_all();
}

int ExpertStore::Hint(int layer, const std::vector<int>& ids, bool lookahead) {
  std::vector<StartRead> reads;
  {
    std::lock_guard<std::mutex> l(mu_);
    uint32_t max_inflight = cfg_.max_prefetch_inflight ? cfg_.max_prefetch_inflight : 2 * io_->queue_depth();
    const bool gate_open = !lookahead || gate_.Allow(NowNs());
    // Every named key keeps its slab until its layer's visit begins
    // (HeatPolicy::Expect), before any of these fills picks a victim: a
    // current-routing hint's resident keys are about to be leased, a
    // look-ahead's are likely next.
    for (int id : ids) {
      if (!table_.ValidKey(layer, id)) continue;
      policy_.Expect(policy_.index(layer, id));
      if (lookahead && table_.entry(layer, id).slab_plus1.load(std::memory_order_relaxed) != 0)
        stats_.lookahead_kept++;
    }
    for (int id : ids) {
      auto loc = locator_->Locate(layer, id);
      if (!loc.ok()) continue;
      const uint32_t pk = policy_.index(layer, id);
      if (table_.entry(layer, id).slab_plus1.load(std::memory_order_relaxed) != 0) continue;  // resident or filling
      // The gate weighs the disk and the slab a fill takes from demand; a
      // fill into a free slab (arena still warming up) evicts nothing and its
      // reads use only spare disk capacity, so it is not gated.
      if (!gate_open && !HasFreeSlabLocked(ClassOf(loc->length))) {
        stats_.prefetch_gated++;
        continue;
      }
      if (lookahead && prefetch_inflight_ >= max_inflight) break;
      int64_t s = AllocateLocked(ClassOf(loc->length), pk, /*speculative=*/lookahead);
      if (s < 0) {
        stats_.prefetch_refused++;
        continue;
      }
      ResolveReusedLocked(static_cast<uint32_t>(s));
      table_.BeginFill(static_cast<uint32_t>(s), layer, id);
      auto fill = std::make_shared<FillState>();
      fill->tag = ++next_fill_tag_;
      priv_[s].fill = fill;
      priv_[s].claims = 0;
      priv_[s].prefetched = true;
      priv_[s].prefill = false;
      priv_[s].prefetch_fill = true;
      priv_[s].lookahead_fill = lookahead;
      priv_[s].lookahead_unresolved = lookahead;
      priv_[s].lookahead_layer = layer;
      priv_[s].lookahead_expert = id;
      prefetch_inflight_++;
      stats_.prefetch_issued++;
      reads.push_back(StartRead{static_cast<uint32_t>(s), *loc, fill, /*speculative=*/lookahead});
    }
  }
  int n = static_cast<int>(reads.size());
  StartReads(std::move(reads));
  return n;
}

absl::Status ExpertStore::Pin(int layer, int expert, bool pinned) {
  std::lock_guard<std::mutex> l(mu_);
  if (!table_.ValidKey(layer, expert))
    return absl::InvalidArgumentError(absl::StrCat("invalid expert (layer ", layer, ", id ", expert, ")"));
  policy_.SetPinned(policy_.index(layer, expert), pinned);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ExpertStore::SetBudget(uint64_t bytes) {
  std::lock_guard<std::mutex> l(mu_);
  uint64_t arena = stats_.arena_bytes;
  if (bytes > arena)
    return absl::InvalidArgumentError(absl::StrCat("budget ", bytes, " exceeds the arena (", arena,
                                                   " bytes) sized at start; restart expertd to grow it"));
  const auto& h = table_.header();
  uint64_t active = 0;
  for (uint32_t c = 0; c < h.num_classes; ++c) {
    uint64_t n = static_cast<uint64_t>(static_cast<long double>(h.classes[c].num_slabs) * bytes / arena);
    n = std::max<uint64_t>(n, std::min<uint64_t>(cfg_.top_k, h.classes[c].num_slabs));
    for (uint32_t i = 0; i < h.classes[c].num_slabs; ++i) {
      uint32_t s = h.classes[c].first_slab + i;
      bool disable = i >= n;
      priv_[s].to_disable = disable;
      if (!disable && CtlState(table_.slab(s).ctl.load()) == kSlabDisabled) table_.SetDisabled(s, false);
    }
    active += n * h.classes[c].slab_bytes;
  }
  ApplyDisableLocked();
  stats_.budget_bytes = active;
  return active;
}

void ExpertStore::ApplyDisableLocked() {
  for (uint32_t s = 0; s < table_.num_slabs(); ++s) {
    if (!priv_[s].to_disable) continue;
    uint32_t state = CtlState(table_.slab(s).ctl.load());
    const uint32_t k = table_.slab(s).key.load(std::memory_order_relaxed);
    if (state == kSlabReady && priv_[s].claims == 0 && table_.TryEvict(s)) {
      state = kSlabFree;
      if (k != kNoKey) policy_.Removed(policy_.index(KeyLayer(k), KeyExpert(k)));
    }
    if (state == kSlabFree) table_.SetDisabled(s, true);
  }
}

void ExpertStore::HarvestLocked() {
  auto now = std::chrono::steady_clock::now();
  if (now - last_harvest_ < std::chrono::milliseconds(20)) return;
  last_harvest_ = now;
  for (uint32_t l = 0; l < table_.num_layers(); ++l) {
    for (uint32_t e = 0; e < table_.num_experts(); ++e) {
      if (table_.entry(int(l), int(e)).hits.exchange(0, std::memory_order_relaxed)) NoteShmUseLocked(int(l), int(e));
    }
  }
  // The policy gets every session's shm hits one by one, in the order they
  // were taken (its recency and layer-phase signals need the order).
  for (uint32_t s = 0; s < table_.max_sessions(); ++s) {
    if (table_.session(s).state.load() == kSessionAttached) DrainHitLogLocked(s);
  }
}

void ExpertStore::DrainHitLogLocked(uint32_t session) {
  stats_.hit_log_lost += table_.DrainHitLog(session, &hit_tail_[session], [&](int layer, int expert) {
    policy_.Touch(policy_.index(layer, expert));
    ObserveRandomResidentLocked();
  });
}

void ExpertStore::ObserveRandomResidentLocked() {
  if (!policy_.learned()) return;  // only the learned order trains on samples
  // xorshift64: a per-store stream, no shared generator.
  observe_rng_ ^= observe_rng_ << 13;
  observe_rng_ ^= observe_rng_ >> 7;
  observe_rng_ ^= observe_rng_ << 17;
  // The first READY slab from a random start: with a budget below the arena
  // most slabs are disabled, and a sample must be a resident key.
  const uint32_t n = table_.num_slabs(), start = static_cast<uint32_t>(observe_rng_ % n);
  for (uint32_t i = 0; i < n && i < 256; ++i) {
    const uint32_t s = (start + i) % n;
    if (CtlState(table_.slab(s).ctl.load(std::memory_order_relaxed)) != kSlabReady) continue;
    const uint32_t k = table_.slab(s).key.load(std::memory_order_relaxed);
    policy_.Observe(policy_.index(KeyLayer(k), KeyExpert(k)));
    return;
  }
}

void ExpertStore::Maintain() {
  std::lock_guard<std::mutex> l(mu_);
  HarvestLocked();
  ApplyDisableLocked();
  cv_.notify_all();  // waiters re-check for slabs released in shared memory
}

StoreStats ExpertStore::Stats() {
  std::lock_guard<std::mutex> l(mu_);
  StoreStats s = stats_;
  for (uint32_t i = 0; i < table_.max_sessions(); ++i) {
    if (table_.session(i).state.load() == kSessionAttached) s.shm_hits += table_.session(i).shm_hits.load();
  }
  s.tier[int(TierId::kRam)].hits += s.shm_hits;
  s.slabs_total = table_.num_slabs();
  for (uint32_t i = 0; i < table_.num_slabs(); ++i) {
    uint32_t st = CtlState(table_.slab(i).ctl.load());
    if (st != kSlabDisabled) s.slabs_active++;
    if (st == kSlabReady) {
      s.slabs_ready++;
      s.resident_bytes += table_.slab(i).capacity;
      if (table_.LeaseCount(i)) s.slabs_leased++;
    }
    if (st == kSlabFilling) s.slabs_filling++;
  }
  s.policy_resident = policy_.num_resident();
  auto io = io_->stats();
  s.io_engine = io_->name();
  s.queue_depth = io_->queue_depth();
  s.io_inflight = io.inflight_chunks;
  s.read_gbps = io.busy_ns ? double(io.bytes) / double(io.busy_ns) : 0.0;
  const uint64_t now = NowNs();
  s.prefetch_gate_open = gate_.Allow(now);
  s.prefetch_precision = gate_.precision();
  s.demand_busy = gate_.demand_busy(now);
  s.policy = policy_.learned() ? "learned" : "heat";
  if (policy_.learned()) {
    s.policy_weights.assign(policy_.weights(), policy_.weights() + HeatPolicy::kFeatures);
    s.policy_horizon_tokens = policy_.horizon_tokens();
  }
  return s;
}

std::vector<HeatEntry> ExpertStore::Heat() {
  std::lock_guard<std::mutex> l(mu_);
  HarvestLocked();
  std::vector<HeatEntry> out;
  out.reserve(size_t(table_.num_layers()) * table_.num_experts());
  for (uint32_t l = 0; l < table_.num_layers(); ++l) {
    for (uint32_t e = 0; e < table_.num_experts(); ++e) {
      uint32_t pk = policy_.index(int(l), int(e));
      HeatEntry h{int(l), int(e), policy_.Heat(pk), false, false, policy_.pinned(pk), 0};
      uint32_t sp1 = table_.entry(int(l), int(e)).slab_plus1.load();
      if (sp1) {
        uint32_t st = CtlState(table_.slab(sp1 - 1).ctl.load());
        h.resident = st == kSlabReady;
        h.filling = st == kSlabFilling;
        h.leases = static_cast<uint32_t>(table_.LeaseCount(sp1 - 1));
      }
      out.push_back(h);
    }
  }
  return out;
}

absl::Status ExpertStore::SaveHeat() {
  if (cfg_.heat_file.empty()) return absl::OkStatus();
  std::lock_guard<std::mutex> l(mu_);
  HarvestLocked();
  return policy_.Save(cfg_.heat_file, locator_->model_id());
}

}  // namespace moe::expertstore
