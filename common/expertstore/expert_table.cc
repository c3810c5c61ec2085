#include "common/expertstore/expert_table.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/aligned_buffer.h"

namespace moe::expertstore {
namespace {

constexpr uint64_t kHeaderBytes = sizeof(ShmHeader);

uint64_t TableBytes(uint32_t layers, uint32_t experts) {
  return AlignUp(uint64_t(layers) * experts * sizeof(ShmTableEntry), 64);
}
uint64_t LeaseRowBytes(uint32_t num_slabs) {
  return AlignUp(sizeof(ShmSessionHeader) + uint64_t(num_slabs) * sizeof(std::atomic<uint32_t>), 64);
}
uint64_t SessionStride(uint32_t num_slabs) {
  return LeaseRowBytes(num_slabs) + uint64_t(kHitLog) * sizeof(std::atomic<uint32_t>);
}

}  // namespace

uint32_t ShmGeometry::num_slabs() const {
  uint32_t n = 0;
  for (const auto& c : classes) n += c.num_slabs;
  return n;
}

uint64_t ShmGeometry::arena_bytes() const {
  uint64_t n = 0;
  for (const auto& c : classes) n += AlignUp(c.slab_bytes, kSlabAlign) * c.num_slabs;
  return n;
}

uint64_t ShmGeometry::control_bytes() const {
  return kHeaderBytes + TableBytes(num_layers, num_experts) + uint64_t(num_slabs()) * sizeof(ShmSlab) +
         uint64_t(max_sessions) * SessionStride(num_slabs());
}

absl::StatusOr<ExpertTable> ExpertTable::Format(void* ctl, uint64_t ctl_bytes, uint8_t* arena, uint64_t arena_bytes,
                                                const ShmGeometry& g) {
  if (g.classes.empty() || g.classes.size() > size_t(kMaxSizeClasses))
    return absl::InvalidArgumentError(absl::StrCat("expert store: ", g.classes.size(), " size classes (1..",
                                                   kMaxSizeClasses, " allowed)"));
  if (g.num_layers == 0 || g.num_experts == 0 || g.num_layers > 65535 || g.num_experts > 65535)
    return absl::InvalidArgumentError("expert store: bad table shape");
  if (g.max_sessions == 0) return absl::InvalidArgumentError("expert store: max_sessions must be > 0");
  if (ctl_bytes < g.control_bytes() || arena_bytes < g.arena_bytes())
    return absl::InvalidArgumentError("expert store: regions smaller than the geometry");
  if (reinterpret_cast<uintptr_t>(ctl) % 64 != 0 || reinterpret_cast<uintptr_t>(arena) % kSlabAlign != 0)
    return absl::InvalidArgumentError("expert store: misaligned regions");
  std::memset(ctl, 0, g.control_bytes());
  auto* h = new (ctl) ShmHeader();
  h->magic = kShmMagic;
  h->version = kShmVersion;
  h->header_bytes = sizeof(ShmHeader);
  h->num_layers = g.num_layers;
  h->num_experts = g.num_experts;
  h->num_slabs = g.num_slabs();
  h->max_sessions = g.max_sessions;
  h->num_classes = static_cast<uint32_t>(g.classes.size());
  h->table_offset = kHeaderBytes;
  h->slabs_offset = h->table_offset + TableBytes(g.num_layers, g.num_experts);
  h->sessions_offset = h->slabs_offset + uint64_t(h->num_slabs) * sizeof(ShmSlab);
  h->session_stride = SessionStride(h->num_slabs);
  h->control_bytes = g.control_bytes();
  h->arena_bytes = g.arena_bytes();
  std::strncpy(h->model_id, g.model_id.c_str(), sizeof(h->model_id) - 1);
  h->active_slabs.store(h->num_slabs);
  ExpertTable t;
  t.hdr_ = h;
  auto* base = static_cast<uint8_t*>(ctl);
  t.table_ = reinterpret_cast<ShmTableEntry*>(base + h->table_offset);
  t.slabs_ = reinterpret_cast<ShmSlab*>(base + h->slabs_offset);
  t.sessions_ = base + h->sessions_offset;
  t.arena_ = arena;
  uint64_t off = 0;
  uint32_t s = 0;
  for (size_t c = 0; c < g.classes.size(); ++c) {
    uint64_t sb = AlignUp(g.classes[c].slab_bytes, kSlabAlign);
    h->classes[c] = ShmSizeClass{sb, s, g.classes[c].num_slabs};
    for (uint32_t i = 0; i < g.classes[c].num_slabs; ++i, ++s) {
      ShmSlab* sl = new (&t.slabs_[s]) ShmSlab();
      sl->ctl.store(CtlWord(1, kSlabFree));
      sl->key.store(kNoKey);
      sl->size_class = static_cast<uint32_t>(c);
      sl->arena_offset = off;
      sl->capacity = sb;
      off += sb;
    }
  }
  for (uint32_t i = 0; i < h->max_sessions; ++i) new (&t.session(i)) ShmSessionHeader();
  return t;
}

absl::StatusOr<ExpertTable> ExpertTable::Attach(void* ctl, uint64_t ctl_bytes, const uint8_t* arena,
                                                uint64_t arena_bytes) {
  if (ctl_bytes < sizeof(ShmHeader)) return absl::DataLossError("expertd shm: control region too small");
  auto* h = static_cast<ShmHeader*>(ctl);
  if (h->magic != kShmMagic) return absl::DataLossError("expertd shm: bad magic (not an expertd control region)");
  if (h->version != kShmVersion || h->header_bytes != sizeof(ShmHeader))
    return absl::FailedPreconditionError(absl::StrCat("expertd shm: version ", h->version, " (this client speaks ",
                                                      kShmVersion, ")"));
  if (h->control_bytes > ctl_bytes || h->arena_bytes > arena_bytes)
    return absl::DataLossError("expertd shm: regions smaller than the header says");
  ExpertTable t;
  t.hdr_ = h;
  auto* base = static_cast<uint8_t*>(ctl);
  t.table_ = reinterpret_cast<ShmTableEntry*>(base + h->table_offset);
  t.slabs_ = reinterpret_cast<ShmSlab*>(base + h->slabs_offset);
  t.sessions_ = base + h->sessions_offset;
  t.arena_ = const_cast<uint8_t*>(arena);  // clients only read through it (mapped PROT_READ)
  return t;
}

ShmSessionHeader& ExpertTable::session(uint32_t s) const {
  return *reinterpret_cast<ShmSessionHeader*>(sessions_ + uint64_t(s) * hdr_->session_stride);
}

std::atomic<uint32_t>* ExpertTable::session_counts(uint32_t s) const {
  return reinterpret_cast<std::atomic<uint32_t>*>(sessions_ + uint64_t(s) * hdr_->session_stride +
                                                  sizeof(ShmSessionHeader));
}

std::atomic<uint32_t>* ExpertTable::session_hit_log(uint32_t s) const {
  return reinterpret_cast<std::atomic<uint32_t>*>(sessions_ + uint64_t(s) * hdr_->session_stride +
                                                  LeaseRowBytes(hdr_->num_slabs));
}

uint64_t ExpertTable::DrainHitLog(uint32_t session, uint64_t* tail, const std::function<void(int, int)>& fn) const {
  ShmSessionHeader& sh = this->session(session);
  std::atomic<uint32_t>* log = session_hit_log(session);
  const uint64_t head = sh.hit_head.load(std::memory_order_acquire);
  uint64_t lost = 0;
  if (head < *tail) *tail = 0;  // the row was reset (session reclaimed): read it from the start
  if (head - *tail > kHitLog) {
    lost = head - *tail - kHitLog;
    *tail = head - kHitLog;
  }
  for (; *tail < head; ++*tail) {
    const uint32_t v = log[*tail % kHitLog].exchange(0, std::memory_order_acquire);
    if (v == 0) break;  // claimed, not written yet: next time
    const uint32_t key = v - 1;
    if (ValidKey(KeyLayer(key), KeyExpert(key))) fn(KeyLayer(key), KeyExpert(key));
  }
  return lost;
}

void ExpertTable::Describe(uint32_t slab, Lease* out) const {
  const ShmSlab& s = slabs_[slab];
  out->slab = slab;
  out->data = arena_ + s.arena_offset;
  out->length = s.length;
  out->num_parts = s.num_parts;
  std::memcpy(out->part_offsets, s.part_offsets, sizeof(out->part_offsets));
  uint32_t key = s.key.load(std::memory_order_acquire);
  out->layer = KeyLayer(key);
  out->expert = KeyExpert(key);
  out->gen = CtlGen(s.ctl.load(std::memory_order_acquire));
}

std::optional<Lease> ExpertTable::TryLease(uint32_t session, int layer, int expert) {
  if (!ValidKey(layer, expert) || session >= hdr_->max_sessions) return std::nullopt;
  ShmTableEntry& e = entry(layer, expert);
  ShmSessionHeader& sh = this->session(session);
  uint32_t sp1 = e.slab_plus1.load(std::memory_order_acquire);
  if (sp1 == 0 || sp1 > hdr_->num_slabs) {
    sh.shm_misses.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  uint32_t s = sp1 - 1;
  ShmSlab& sl = slabs_[s];
  uint64_t c1 = sl.ctl.load(std::memory_order_acquire);
  if (CtlState(c1) != kSlabReady || sl.key.load(std::memory_order_acquire) != PackKey(layer, expert)) {
    sh.shm_misses.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  std::atomic<uint32_t>& cnt = session_counts(session)[s];
  cnt.fetch_add(1, std::memory_order_seq_cst);
  uint64_t c2 = sl.ctl.load(std::memory_order_seq_cst);
  if (c2 != c1) {
    cnt.fetch_sub(1, std::memory_order_seq_cst);
    sh.shm_misses.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  // Leased at generation c1: the descriptor fields written before READY was
  // published are stable until we release.
  Lease l;
  l.slab = s;
  l.gen = CtlGen(c1);
  l.layer = layer;
  l.expert = expert;
  l.data = arena_ + sl.arena_offset;
  l.length = sl.length;
  l.num_parts = sl.num_parts;
  std::memcpy(l.part_offsets, sl.part_offsets, sizeof(l.part_offsets));
  e.hits.fetch_add(1, std::memory_order_relaxed);
  sh.shm_hits.fetch_add(1, std::memory_order_relaxed);
  const uint64_t at = sh.hit_head.fetch_add(1, std::memory_order_relaxed);
  session_hit_log(session)[at % kHitLog].store(PackKey(layer, expert) + 1, std::memory_order_release);
  return l;
}

void ExpertTable::Release(uint32_t session, uint32_t slab) {
  if (session >= hdr_->max_sessions || slab >= hdr_->num_slabs) return;
  session_counts(session)[slab].fetch_sub(1, std::memory_order_release);
}

uint64_t ExpertTable::LeaseCount(uint32_t slab) const {
  uint64_t n = 0;
  for (uint32_t s = 0; s < hdr_->max_sessions; ++s) n += session_counts(s)[slab].load(std::memory_order_seq_cst);
  return n;
}

void ExpertTable::BeginFill(uint32_t slab, int layer, int expert) {
  ShmSlab& sl = slabs_[slab];
  uint64_t c = sl.ctl.load(std::memory_order_relaxed);
  sl.key.store(PackKey(layer, expert), std::memory_order_relaxed);
  sl.length = 0;
  sl.num_parts = 0;
  sl.ctl.store(CtlWord(CtlGen(c) + 1, kSlabFilling), std::memory_order_release);
  entry(layer, expert).slab_plus1.store(slab + 1, std::memory_order_release);
}

void ExpertTable::Publish(uint32_t slab, uint64_t length, uint32_t crc, uint32_t num_parts, const uint64_t* parts,
                          uint64_t fill_ns) {
  ShmSlab& sl = slabs_[slab];
  sl.length = length;
  sl.crc32c = crc;
  sl.num_parts = num_parts > 8 ? 8 : num_parts;
  for (uint32_t i = 0; i < sl.num_parts; ++i) sl.part_offsets[i] = parts[i];
  sl.fill_ns = fill_ns;
  uint64_t c = sl.ctl.load(std::memory_order_relaxed);
  sl.ctl.store(CtlWord(CtlGen(c) + 1, kSlabReady), std::memory_order_release);
}

void ExpertTable::Abort(uint32_t slab) {
  ShmSlab& sl = slabs_[slab];
  uint32_t key = sl.key.load(std::memory_order_relaxed);
  uint64_t c = sl.ctl.load(std::memory_order_relaxed);
  sl.ctl.store(CtlWord(CtlGen(c) + 1, kSlabFree), std::memory_order_seq_cst);
  if (key != kNoKey) {
    auto& e = entry(KeyLayer(key), KeyExpert(key));
    uint32_t expected = slab + 1;
    e.slab_plus1.compare_exchange_strong(expected, 0);
  }
  sl.key.store(kNoKey, std::memory_order_release);
}

bool ExpertTable::TryEvict(uint32_t slab) {
  ShmSlab& sl = slabs_[slab];
  uint64_t c = sl.ctl.load(std::memory_order_relaxed);
  if (CtlState(c) != kSlabReady) return false;
  sl.ctl.store(CtlWord(CtlGen(c) + 1, kSlabEvicting), std::memory_order_seq_cst);
  if (LeaseCount(slab) != 0) {
    sl.ctl.store(CtlWord(CtlGen(c) + 2, kSlabReady), std::memory_order_seq_cst);
    return false;
  }
  uint32_t key = sl.key.load(std::memory_order_relaxed);
  if (key != kNoKey) {
    auto& e = entry(KeyLayer(key), KeyExpert(key));
    uint32_t expected = slab + 1;
    e.slab_plus1.compare_exchange_strong(expected, 0);
  }
  sl.key.store(kNoKey, std::memory_order_release);
  sl.ctl.store(CtlWord(CtlGen(c) + 2, kSlabFree), std::memory_order_release);
  return true;
}

void ExpertTable::SetDisabled(uint32_t slab, bool disabled) {
  ShmSlab& sl = slabs_[slab];
  uint64_t c = sl.ctl.load(std::memory_order_relaxed);
  sl.ctl.store(CtlWord(CtlGen(c) + 1, disabled ? kSlabDisabled : kSlabFree), std::memory_order_release);
}

void ExpertTable::LeaseForSession(uint32_t session, uint32_t slab) {
  session_counts(session)[slab].fetch_add(1, std::memory_order_seq_cst);
}

void ExpertTable::ReclaimSession(uint32_t session) {
  auto* cnt = session_counts(session);
  for (uint32_t i = 0; i < hdr_->num_slabs; ++i) cnt[i].store(0, std::memory_order_seq_cst);
  ShmSessionHeader& sh = this->session(session);
  std::atomic<uint32_t>* log = session_hit_log(session);
  for (uint32_t i = 0; i < kHitLog; ++i) log[i].store(0, std::memory_order_relaxed);
  sh.hit_head.store(0, std::memory_order_release);
  sh.token.store(0);
  sh.pid = 0;
  sh.state.store(kSessionFree, std::memory_order_release);
}

}  // namespace moe::expertstore
