#include "services/gateway/sequence_placer.h"

#include <limits>

#include "common/base/fnv1a.h"
#include "common/base/log.h"
#include "common/base/status.h"

namespace moe::gateway {

std::vector<uint64_t> SequencePlacer::BlockHashes(const std::vector<int32_t>& prompt, int block_tokens) {
  std::vector<uint64_t> out;
  if (block_tokens <= 0) return out;
  Fnv1a64 h;  // over token ids, chained across blocks
  size_t full = prompt.size() / static_cast<size_t>(block_tokens);
  for (size_t b = 0; b < full; ++b) {
    for (int i = 0; i < block_tokens; ++i) h.U32(static_cast<uint32_t>(prompt[b * block_tokens + i]));
    out.push_back(h.value());
  }
  return out;
}

SequencePlacer::SequencePlacer(std::vector<std::shared_ptr<Worker>> workers, SequencePlacerConfig config)
    : config_(config), workers_(std::move(workers)) {
  slots_.resize(workers_.size());
  for (size_t i = 0; i < workers_.size(); ++i) slots_[i].worker = workers_[i];
}

SequencePlacer::~SequencePlacer() = default;

int SequencePlacer::PickLocked(const std::vector<uint64_t>& hashes, const std::vector<bool>* exclude) const {
  int min_load = std::numeric_limits<int>::max();
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i].alive || (exclude && (*exclude)[i])) continue;
    min_load = std::min(min_load, slots_[i].active);
  }
  if (min_load == std::numeric_limits<int>::max()) return -1;
  int best = -1;
  size_t best_match = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (!s.alive || (exclude && (*exclude)[i])) continue;
    if (s.active > min_load + config_.affinity_slack) continue;
    size_t match = 0;
    while (match < hashes.size() && s.blocks.count(hashes[match])) ++match;
    if (best < 0 || match > best_match || (match == best_match && s.active < slots_[best].active)) {
      best = static_cast<int>(i);
      best_match = match;
    }
  }
  return best;
}

void SequencePlacer::RememberLocked(int idx, const std::vector<uint64_t>& hashes) {
  Slot& s = slots_[idx];
  for (uint64_t h : hashes) {
    if (s.blocks.insert(h).second) s.block_order.push_back(h);
  }
  while (s.block_order.size() > config_.remembered_blocks) {
    s.blocks.erase(s.block_order.front());
    s.block_order.pop_front();
  }
}

int SequencePlacer::Pick(const std::vector<int32_t>& prompt) const {
  auto hashes = BlockHashes(prompt, config_.block_tokens);
  std::lock_guard<std::mutex> lock(mu_);
  return PickLocked(hashes, nullptr);
}

void SequencePlacer::MarkDead(size_t index, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (index >= slots_.size()) return;
  if (slots_[index].alive) {
    MOE_LOG(WARNING) << "worker " << slots_[index].worker->name() << " out of rotation: " << why;
  }
  slots_[index].alive = false;
  slots_[index].last_error = why;
  ++slots_[index].failures;
}

void SequencePlacer::SetAdmission(Admission admit) {
  std::lock_guard<std::mutex> lock(mu_);
  admit_ = std::move(admit);
}

void SequencePlacer::ProbeAll() {
  for (size_t i = 0; i < workers_.size(); ++i) {
    auto info = workers_[i]->Health();
    Admission admit;
    {
      std::lock_guard<std::mutex> lock(mu_);
      admit = admit_;
    }
    absl::Status admitted = info.ok() && admit ? admit(workers_[i]->name(), *info) : absl::OkStatus();
    std::lock_guard<std::mutex> lock(mu_);
    Slot& s = slots_[i];
    if (info.ok() && !admitted.ok()) {
      if (!s.refused) {
        MOE_LOG(WARNING) << "worker " << s.worker->name() << " refused: " << admitted.message();
      }
      s.refused = true;
      s.alive = false;
      s.info = *info;
      s.last_error = std::string(admitted.message());
      continue;
    }
    s.refused = false;
    if (info.ok()) {
      if (!s.alive) {
        MOE_LOG(INFO) << "worker " << s.worker->name() << " back in rotation";
      }
      s.alive = true;
      s.info = *info;
    } else {
      if (s.alive) {
        MOE_LOG(WARNING) << "worker " << s.worker->name() << " out of rotation: " << info.status().ToString();
        ++s.failures;
      }
      s.alive = false;
      s.last_error = info.status().ToString();
    }
  }
}

std::vector<WorkerSnapshot> SequencePlacer::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<WorkerSnapshot> out;
  for (const auto& s : slots_) {
    WorkerSnapshot w;
    w.name = s.worker->name();
    w.alive = s.alive;
    w.active = s.active;
    w.tokens_generated = s.tokens;
    w.sequences_started = s.started;
    w.failures = s.failures;
    w.last_error = s.last_error;
    w.info = s.info;
    out.push_back(std::move(w));
  }
  return out;
}

int SequencePlacer::alive_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const auto& s : slots_) n += s.alive ? 1 : 0;
  return n;
}

// One logical sequence: the current attempt plus finished attempts kept until
// destruction (an attempt is never destroyed on its own callback thread).
class SequencePlacer::Handle final : public SeqHandle {
 public:
  struct State {
    SequencePlacer* placer = nullptr;
    GenerateParams params;
    std::vector<uint64_t> hashes;
    SeqSink sink;
    std::mutex mu;
    std::vector<std::unique_ptr<SeqHandle>> attempts;
    std::vector<bool> tried;
    bool cancelled = false;
    bool delivered = false;
    int worker = -1;
  };

  explicit Handle(std::shared_ptr<State> st) : st_(std::move(st)) {}

  ~Handle() override {
    std::vector<std::unique_ptr<SeqHandle>> attempts;
    {
      std::lock_guard<std::mutex> lock(st_->mu);
      st_->cancelled = true;
      for (auto& a : st_->attempts) a->Cancel();
      attempts.swap(st_->attempts);
    }
    attempts.clear();  // joins each attempt: no sink call after this
  }

  void Cancel() override {
    std::lock_guard<std::mutex> lock(st_->mu);
    st_->cancelled = true;
    for (auto& a : st_->attempts) a->Cancel();
  }

  // Starts an attempt on a live worker not tried yet; false when none is left.
  // Caller holds st->mu.
  static bool StartAttemptLocked(const std::shared_ptr<State>& st, absl::Status* why) {
    SequencePlacer* s = st->placer;
    int idx;
    {
      std::lock_guard<std::mutex> lock(s->mu_);
      idx = s->PickLocked(st->hashes, &st->tried);
      if (idx < 0) {
        *why = absl::UnavailableError(s->slots_.empty() ? "no inference worker configured"
                                                        : "no live inference worker (all are down or failed)");
        return false;
      }
      s->RememberLocked(idx, st->hashes);
      ++s->slots_[idx].active;
      ++s->slots_[idx].started;
    }
    st->tried[idx] = true;
    st->worker = idx;
    std::weak_ptr<State> weak = st;
    auto worker = s->workers_[idx];
    st->attempts.push_back(worker->Generate(st->params, [weak, idx](SeqEvent ev) {
      auto st = weak.lock();
      if (!st) return;
      OnEvent(st, idx, std::move(ev));
    }));
    return true;
  }

  static void OnEvent(const std::shared_ptr<State>& st, int idx, SeqEvent ev) {
    SequencePlacer* s = st->placer;
    if (ev.kind == SeqEvent::kToken) {
      {
        std::lock_guard<std::mutex> lock(s->mu_);
        ++s->slots_[idx].tokens;
      }
      {
        std::lock_guard<std::mutex> lock(st->mu);
        st->delivered = true;
      }
      st->sink(std::move(ev));
      return;
    }
    {
      std::lock_guard<std::mutex> lock(s->mu_);
      --s->slots_[idx].active;
    }
    if (ev.kind == SeqEvent::kError && ev.status.code() == absl::StatusCode::kUnavailable) {
      s->MarkDead(idx, ev.status.ToString());
      std::lock_guard<std::mutex> lock(st->mu);
      if (!st->delivered && !st->cancelled &&
          static_cast<int>(st->attempts.size()) < s->config_.max_attempts) {
        absl::Status why;
        MOE_LOG(WARNING) << "sequence " << st->params.request_id << ": worker " << s->workers_[idx]->name()
                         << " failed before streaming (" << ev.status.ToString() << "); retrying elsewhere";
        if (StartAttemptLocked(st, &why)) return;
      }
      ev.status = Annotate(ev.status, "worker " + s->workers_[idx]->name());
    }
    st->sink(std::move(ev));
  }

 private:
  std::shared_ptr<State> st_;
};

std::unique_ptr<SeqHandle> SequencePlacer::Start(GenerateParams params, SeqSink sink) {
  auto st = std::make_shared<Handle::State>();
  st->placer = this;
  st->hashes = BlockHashes(params.prompt, config_.block_tokens);
  st->params = std::move(params);
  st->sink = std::move(sink);
  st->tried.assign(slots_.size(), false);
  auto handle = std::make_unique<Handle>(st);
  absl::Status why;
  bool started;
  {
    std::lock_guard<std::mutex> lock(st->mu);
    started = Handle::StartAttemptLocked(st, &why);
  }
  if (!started) {
    SeqEvent ev;
    ev.kind = SeqEvent::kError;
    ev.status = why;
    st->sink(std::move(ev));
  }
  return handle;
}

}  // namespace moe::gateway
