// Planned prefill: long prompts fed in layer-major passes (batcher.h).
#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "services/inferd/batcher.h"

namespace moe::inferd {

bool Batcher::WantsPass(const Seq& s) const {
  return passes_on_ && !s.in_pass &&
         static_cast<int64_t>(s.req.prompt.size()) - s.prompt_fed > config_.prefill_chunk;
}

// Members in arrival order until the pass's rows are used; a prompt longer
// than a whole pass is cut into equal parts (ceil(R / passes) rows each), so
// no part is a short tail that reads every expert again for a few rows.
void Batcher::MaybeStartPass(Deliveries* out) {
  if (pass_) return;
  auto run = std::make_unique<PassRun>();
  int64_t left = config_.prefill_pass_rows;
  for (auto& sp : active_) {
    Seq& s = *sp;
    if (left == 0) break;
    if (!s.state || !WantsPass(s)) continue;
    const int64_t rem = static_cast<int64_t>(s.req.prompt.size()) - s.prompt_fed;
    int64_t take = std::min(rem, left);
    if (run->seqs.empty() && rem > left) {
      const int64_t parts = (rem + left - 1) / left;
      take = (rem + parts - 1) / parts;
    }
    run->seqs.push_back(&s);
    run->ids.emplace_back(s.req.prompt.begin() + s.prompt_fed, s.req.prompt.begin() + s.prompt_fed + take);
    run->len0.push_back(s.state->length());
    run->samples.push_back(take == rem);
    left -= take;
  }
  if (run->seqs.empty()) return;
  run->logits.assign(std::count(run->samples.begin(), run->samples.end(), true) *
                         static_cast<size_t>(model_->vocab_size()),
                     0.0f);
  for (Seq* m : run->seqs) m->in_pass = true;
  pass_ = std::move(run);
  Step step = PassStep();
  absl::StatusOr<std::unique_ptr<SequenceModel::Pass>> p = model_->BeginPass(step.items);
  if (!p.ok()) {
    // Fails its members as a failed step would (nothing was fed).
    for (Seq* m : pass_->seqs) m->in_pass = false;
    std::unique_ptr<PassRun> failed = std::move(pass_);
    FeedBack(step, p.status(), failed->logits, out);
    return;
  }
  pass_->pass = std::move(*p);
  std::lock_guard<std::mutex> lock(mu_);
  stats_.prefill_pass_rows += step.plan.total_tokens;
  stats_.prefill_tokens += step.plan.total_tokens;
}

// One slice: layers until the pass is through them or, while anybody else
// waits for a step (a live sequence outside the pass, or a new request),
// until prefill_slice_seconds have passed (at least one layer).
void Batcher::AdvancePassSlice(Deliveries* out) {
  bool others = false;
  for (const auto& s : active_) others = others || (s && !s->in_pass && !WantsPass(*s));
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = Clock::now();
  const int64_t fetches0 = model_->expert_fetches();
  auto count_fetches = [&] {
    if (fetches0 < 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    stats_.expert_fetches += model_->expert_fetches() - fetches0;
  };
  absl::Status st;
  while (st.ok() && !pass_->pass->layers_done()) {
    st = model_->AdvancePass(*pass_->pass, 1);
    if (!others) {
      std::lock_guard<std::mutex> lock(mu_);
      others = !incoming_.empty();
    }
    if (others && std::chrono::duration<double>(Clock::now() - t0).count() >= config_.prefill_slice_seconds) break;
  }
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  if (others) {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.max_pass_slice_seconds = std::max(stats_.max_pass_slice_seconds, took);
  }
  if (st.ok() && !pass_->pass->layers_done()) {
    count_fetches();
    return;
  }
  if (st.ok()) st = model_->FinishPass(*pass_->pass);
  count_fetches();
  Step step = PassStep();
  for (Seq* m : pass_->seqs) m->in_pass = false;
  std::unique_ptr<PassRun> done = std::move(pass_);
  if (st.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.prefill_passes;
    ++stats_.steps;
  }
  FeedBack(step, st, done->logits, out);
}

Batcher::Step Batcher::PassStep() {
  Step step;
  step.in.resize(active_.size());
  const int32_t V = model_->vocab_size();
  size_t li = 0;
  for (size_t k = 0; k < pass_->seqs.size(); ++k) {
    Seq* m = pass_->seqs[k];
    const size_t idx = std::find_if(active_.begin(), active_.end(), [&](const auto& p) { return p.get() == m; }) -
                       active_.begin();
    step.in[idx].prefill_remaining = static_cast<int64_t>(m->req.prompt.size()) - m->prompt_fed;
    const int64_t n = static_cast<int64_t>(pass_->ids[k].size());
    step.plan.entries.push_back({idx, n, static_cast<bool>(pass_->samples[k])});
    step.plan.total_tokens += n;
    step.tokens.push_back(pass_->ids[k]);
    SequenceModel::Item it;
    it.state = m->state.get();
    it.tokens = pass_->ids[k];  // the pass's own copy: it outlives the step
    it.prefill = true;
    it.logits = pass_->samples[k] ? pass_->logits.data() + (li++) * V : nullptr;
    step.items.push_back(it);
  }
  return step;
}

void Batcher::AbandonPassLocked() {
  for (size_t k = 0; k < pass_->seqs.size(); ++k) {
    Seq* m = pass_->seqs[k];
    m->in_pass = false;
    if (absl::Status t = model_->Truncate(*m->state, pass_->len0[k]); !t.ok()) {
      // A state that cannot be rolled back cannot be trusted: start it again.
      MOE_LOG(WARNING) << "abandoned prefill pass: " << t.ToString();
      m->state = model_->NewState();
      m->prompt_fed = 0;
      m->cached = 0;
      m->fed.clear();
    }
  }
  ++stats_.prefill_pass_aborts;
  pass_.reset();
}

}  // namespace moe::inferd
