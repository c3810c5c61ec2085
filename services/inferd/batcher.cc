#include "services/inferd/batcher.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/base/log.h"

namespace moe::inferd {

Batcher::Batcher(SequenceModel* model, BatcherConfig config)
    : model_(model), config_(config), prefix_(config.prefix_cache_bytes, model, config.prefix_disk) {
  passes_on_ = config_.prefill_pass_rows > 0 && model_->can_rollback() && model_->pass_rows_for_bytes(1 << 30) > 0;
  thread_ = std::thread([this] { Loop(); });
}

Batcher::~Batcher() { Shutdown(); }

void Batcher::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

absl::Status Batcher::Submit(SeqRequest req, SeqCallback cb) {
  const int64_t n = static_cast<int64_t>(req.prompt.size());
  if (n == 0) return absl::InvalidArgumentError("empty prompt");
  if (req.max_tokens < 1) return absl::InvalidArgumentError("max_tokens must be >= 1");
  for (int32_t t : req.prompt) {
    if (t < 0 || t >= model_->vocab_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("prompt token id ", t, " outside the vocabulary (0..", model_->vocab_size() - 1, ")"));
    }
  }
  if (n + req.max_tokens > model_->max_context()) {
    return absl::InvalidArgumentError(absl::StrCat("prompt (", n, " tokens) + max_tokens (", req.max_tokens,
                                                   ") exceeds the context of ", model_->max_context()));
  }
  if (req.min_tokens < 0) return absl::InvalidArgumentError("min_tokens must be >= 0");
  for (const auto& [tok, bias] : req.logit_bias) {
    if (tok < 0 || tok >= model_->vocab_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("logit_bias token id ", tok, " outside the vocabulary (0..", model_->vocab_size() - 1, ")"));
    }
    if (!(bias >= -100.0f && bias <= 100.0f)) {
      return absl::InvalidArgumentError(absl::StrCat("logit_bias for token ", tok, " must be in [-100, 100]"));
    }
  }
  if (req.constraint && req.constraint->vocab_size() != model_->vocab_size()) {
    return absl::InvalidArgumentError(absl::StrCat("constraint vocabulary ", req.constraint->vocab_size(),
                                                   " differs from the model's ", model_->vocab_size()));
  }
  const int64_t budget = model_->kv_budget_bytes();
  const int64_t need = budget > 0 ? (n + req.max_tokens) * model_->kv_bytes_per_token() : 0;
  if (budget > 0 && need > budget) {
    return absl::InvalidArgumentError(absl::StrCat("prompt (", n, " tokens) + max_tokens (", req.max_tokens,
                                                   ") need ", need, " B of KV; this worker's serving plan holds ",
                                                   budget, " B in all"));
  }
  auto s = std::make_unique<Seq>();
  if (req.sampling.repetition_penalty != 1.0f) s->seen = req.prompt;
  if (req.constraint) s->mask.resize(MaskWords(model_->vocab_size()));
  s->choosers.Pool(&pooled_choosers_);  // pointers only: the pool is read and credited on the loop thread
  s->seed = req.has_seed ? req.seed : std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32);
  s->req = std::move(req);
  s->cb = std::move(cb);
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return absl::UnavailableError("inferd is shutting down");
  if (static_cast<int>(live_.size()) >= config_.max_sequences) {
    return absl::ResourceExhaustedError(
        absl::StrCat("worker full: ", live_.size(), " live sequences (max ", config_.max_sequences, ")"));
  }
  if (live_.count(s->req.id)) return absl::AlreadyExistsError(absl::StrCat("request id ", s->req.id, " is live"));
  if (budget > 0 && kv_reserved_ + need > budget) {
    return absl::ResourceExhaustedError(absl::StrCat("worker's KV budget full: ", kv_reserved_, " of ", budget,
                                                     " B held by ", live_.size(), " live sequences; this request needs ",
                                                     need, " B"));
  }
  s->kv_reserved = need;
  kv_reserved_ += need;
  if (s->req.constraint) ++stats_.constrained;
  live_[s->req.id] = s.get();
  incoming_.push_back(std::move(s));
  cv_.notify_all();
  return absl::OkStatus();
}

bool Batcher::Cancel(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(id);
  if (it == live_.end()) return false;
  it->second->cancel = true;
  cv_.notify_all();
  return true;
}

BatcherStats Batcher::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  BatcherStats s = stats_;
  s.active = static_cast<int>(live_.size());
  return s;
}

void Batcher::EndSeq(Seq& s, EndReason why, absl::Status error, Deliveries* out) {
  SeqOutput o;
  o.finished = true;
  o.reason = why;
  o.error = std::move(error);
  o.prompt_tokens = static_cast<int32_t>(s.req.prompt.size());
  o.completion_tokens = static_cast<int32_t>(s.generated.size());
  o.cached_prompt_tokens = static_cast<int32_t>(s.cached);
  o.accepted_prediction_tokens = static_cast<int32_t>(s.spec.accepted);
  o.rejected_prediction_tokens = static_cast<int32_t>(s.spec.drafted - s.spec.accepted);
  out->emplace_back(s.cb, std::move(o));
}

// The batcher thread: every pass admits (new sequences in, cancelled ones
// out), plans one step over the active sequences, executes it as one model
// Forward, and feeds the sampled tokens back to their sequences; callbacks run
// after each phase that produced them, outside the lock.
void Batcher::Loop() {
  std::vector<float> logits;
  while (true) {
    Deliveries out;
    // Ended sequences leave active_, then their callbacks run (outside the lock).
    auto deliver = [&] {
      active_.erase(std::remove(active_.begin(), active_.end(), nullptr), active_.end());
      for (auto& [cb, o] : out) cb(std::move(o));
      out.clear();
    };
    const bool running = Admit(&out);
    deliver();
    if (!running) return;
    if (active_.empty()) {
      guard_pending_.valid = false;  // an idle wait is not a step's cost
      continue;
    }
    StartNewSequences();
    if (passes_on_) {
      // A layer-major pass over the long prompts: one slice of it, then a
      // step of everybody else.
      MaybeStartPass(&out);
      if (pass_) AdvancePassSlice(&out);
      deliver();
    }
    // auto's DraftGuard sees the whole loop period of a pure decode step (planning with its drafts,
    // the forward, drawing, and delivering the tokens up to the next step), observed here at the next
    // step's start: what a client gets per step, including the per-step serving costs drafts amortize.
    const auto step0 = std::chrono::steady_clock::now();
    if (guard_pending_.valid) {
      const GuardPending& p = guard_pending_;
      const double period = std::chrono::duration<double>(step0 - p.start).count();
      // The chooser's step cost (pure decode steps only: drafts go only into those): the period less the
      // MTP drafting (the chooser counts that per draft).
      if (!p.has_prefill) step_cost_.ObserveStep(p.decode_seqs, p.rows, period - p.draft_seconds, p.drafting);
      if (config_.spec.mode == SpecMode::kAuto && !p.has_prefill) {
        draft_guard_.Observe(p.decode_seqs, p.drafter, p.produced, period);
      }
      if (!p.has_prefill) {
        std::lock_guard<std::mutex> lock(mu_);
        const bool verify = p.rows > p.decode_seqs;  // some sequence fed drafts
        (verify ? stats_.spec_verify_step_seconds : stats_.spec_plain_step_seconds) += period;
        (verify ? stats_.spec_verify_step_tokens : stats_.spec_plain_step_tokens) += p.produced;
        stats_.spec_guard_blocks = draft_guard_.blocks();
      }
    }
    guard_pending_.valid = false;
    Step step = PlanOneStep(&logits);
    if (step.items.empty()) continue;  // everybody is in the pass
    const absl::Status st = Execute(step);
    FeedBack(step, st, logits, &out);
    if (st.ok()) {
      int64_t rows = 0;
      for (const auto& it : step.items) rows += static_cast<int64_t>(it.tokens.size());
      guard_pending_ = {true,           step0,         rows,          step.decode_seqs, step.has_prefill,
                        step.drafter,   step.produced, step.draft_seconds, step.drafting};
    }
    deliver();
  }
}

// Admit: waits for work, takes the incoming sequences and drops the cancelled
// ones (every one on shutdown) BEFORE anything is planned. false: shut down,
// nothing left to run.
bool Batcher::Admit(Deliveries* out) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(50),
               [&] { return stop_ || !incoming_.empty() || !active_.empty(); });
  // Admit new sequences (their prefix lookup is StartNewSequences', outside the lock).
  while (!incoming_.empty()) {
    active_.push_back(std::move(incoming_.front()));
    incoming_.pop_front();
  }
  // Drop cancelled (and everything on shutdown) BEFORE planning; a pass with
  // such a member is abandoned first (its states are truncated back).
  if (pass_) {
    bool abandon = stop_;
    for (const Seq* m : pass_->seqs) abandon = abandon || m->cancel;
    if (abandon) AbandonPassLocked();
  }
  for (auto& s : active_) {
    if (s->cancel || stop_) {
      stats_.max_steps_after_cancel = std::max(stats_.max_steps_after_cancel, s->steps_after_cancel);
      ++stats_.cancelled;
      EndSeq(*s, EndReason::kCancelled, absl::OkStatus(), out);
      ForgetLocked(*s);
      s.reset();
    }
  }
  active_.erase(std::remove(active_.begin(), active_.end(), nullptr), active_.end());
  return !(stop_ && active_.empty());
}

void Batcher::ForgetLocked(const Seq& s) {
  live_.erase(s.req.id);
  kv_reserved_ -= s.kv_reserved;
}

// New sequences get their KV state, from the prefix cache when it shares a prefix.
void Batcher::StartNewSequences() {
  if (const int64_t budget = model_->kv_budget_bytes(); budget > 0) {
    // The prefix cache keeps only the KV the live sequences' reservations leave.
    int64_t room;
    {
      std::lock_guard<std::mutex> lock(mu_);
      room = budget - kv_reserved_;
    }
    prefix_.SetMaxBytes(std::min(config_.prefix_cache_bytes, room));
  }
  for (auto& s : active_) {
    if (s->state) continue;
    auto hit = prefix_.Lookup(s->req.prompt);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.prefix_lookups;
    }
    if (hit.tokens > 0) {
      auto cloned = model_->Clone(*hit.state, hit.tokens);
      if (cloned.ok()) {
        s->state = std::move(*cloned);
        s->cached = hit.tokens;
        s->prompt_fed = hit.tokens;
        s->fed.assign(s->req.prompt.begin(), s->req.prompt.begin() + hit.tokens);
        std::lock_guard<std::mutex> lock(mu_);
        stats_.prefix_hit_tokens += hit.tokens;
      } else {
        MOE_LOG(WARNING) << "prefix clone failed: " << cloned.status().ToString();
      }
    }
    if (!s->state) s->state = model_->NewState();
  }
}

// Plan: which tokens each active sequence feeds this step (decode: its pending
// token; prefill: the next chunk) and which rows get logits.
Batcher::Step Batcher::PlanOneStep(std::vector<float>* logits) {
  const int32_t V = model_->vocab_size();
  Step step;
  {
    // The step starts here: a cancel that comes while it plans (MTP drafting takes a while) is one
    // during the step, finished but not delivered (FeedBack), not a step after the cancel.
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& s : active_) s->cancel_at_plan = s->cancel;
  }
  std::vector<PlanInput>& in = step.in;
  in.resize(active_.size());
  for (size_t i = 0; i < active_.size(); ++i) {
    Seq& s = *active_[i];
    in[i].prefill_remaining = static_cast<int64_t>(s.req.prompt.size()) - s.prompt_fed;
    in[i].hold = s.in_pass || WantsPass(s);
  }
  step.plan = PlanStep(in, config_.max_step_tokens, config_.prefill_chunk);
  if (step.plan.entries.empty()) return step;
  const StepPlan& plan = step.plan;
  std::vector<SequenceModel::Item>& items = step.items;
  items.resize(plan.entries.size());
  std::vector<std::vector<int32_t>>& step_tokens = step.tokens;
  step_tokens.resize(plan.entries.size());
  // Decode entries first get their drafts (speculation; outside the lock: MTP drafts run the MTP layer).
  int64_t planned = plan.total_tokens;
  size_t sampling = 0;
  for (const auto& e : plan.entries) {
    if (in[e.index].prefill_remaining == 0) {
      ++step.decode_seqs;
    } else {
      step.has_prefill = true;
    }
  }
  // auto drafts only in pure decode steps: a step carrying a prompt chunk is the chunk's cost, where a
  // draft row can neither be judged (the guard does not observe such steps) nor gain much.
  const bool guessing = !step.has_prefill;
  const AllowedDrafters allowed{guessing && draft_guard_.Allow(step.decode_seqs, DraftSource::kNgram),
                                guessing && draft_guard_.Allow(step.decode_seqs, DraftSource::kMtp)};
  for (const auto& e : plan.entries) {
    Seq& s = *active_[e.index];
    s.drafts.clear();
    if (in[e.index].prefill_remaining == 0) {
      const auto d0 = std::chrono::steady_clock::now();
      s.drafts = Drafts(s, step.decode_seqs, planned, allowed);
      if (s.used == DraftSource::kMtp) {
        step.draft_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - d0).count();
      }
      planned += static_cast<int64_t>(s.drafts.size());
      if (!s.drafts.empty()) ++step.drafting;
      if (s.used != DraftSource::kNone && !s.drafts.empty() && step.drafter != DraftSource::kMtp) step.drafter = s.used;
    }
    sampling += e.samples ? 1 + s.drafts.size() : 0;
  }
  logits->assign(sampling * static_cast<size_t>(V), 0.0f);
  size_t li = 0;
  int64_t decode_rows = 0, prefill_rows = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);  // cancel flags are read under the lock
    for (size_t k = 0; k < plan.entries.size(); ++k) {
      const PlanEntry& e = plan.entries[k];
      Seq& s = *active_[e.index];
      if (s.cancel_at_plan) ++s.steps_after_cancel;  // must stay 0: cancelled ones were dropped above
      if (in[e.index].prefill_remaining == 0) {
        step_tokens[k] = {s.pending};
        step_tokens[k].insert(step_tokens[k].end(), s.drafts.begin(), s.drafts.end());
        decode_rows += static_cast<int64_t>(step_tokens[k].size());
      } else {
        step_tokens[k].assign(s.req.prompt.begin() + s.prompt_fed, s.req.prompt.begin() + s.prompt_fed + e.tokens);
        prefill_rows += e.tokens;
      }
      items[k].state = s.state.get();
      items[k].tokens = step_tokens[k];
      items[k].logit_rows = 1 + static_cast<int64_t>(s.drafts.size());
      items[k].prefill = in[e.index].prefill_remaining > 0;
      items[k].logits = e.samples ? logits->data() + li * V : nullptr;
      if (e.samples) li += items[k].logit_rows;
    }
    ++stats_.steps;
    stats_.decode_tokens += decode_rows;
    stats_.prefill_tokens += prefill_rows;
    stats_.max_batch_rows = std::max<int64_t>(stats_.max_batch_rows, static_cast<int64_t>(items.size()));
  }
  return step;
}

// Execute: one Forward over every planned row.
absl::Status Batcher::Execute(Step& step) {
  const int64_t fetches0 = model_->expert_fetches();
  const absl::Status st = model_->Forward(step.items);
  if (fetches0 >= 0) {
    const int64_t d = model_->expert_fetches() - fetches0;
    std::lock_guard<std::mutex> lock(mu_);
    stats_.expert_fetches += d;
    stats_.last_step_expert_fetches = d;
  }
  return st;
}

// Feed back: sample each sampling row, stream its token, finish sequences at a
// stop token or their length (their KV goes to the prefix cache); a failed
// step ends every sequence in it with the error.
void Batcher::FeedBack(Step& step, const absl::Status& st, const std::vector<float>& logits, Deliveries* out) {
  const int32_t V = model_->vocab_size();
  if (!st.ok()) {
    MOE_LOG(ERROR) << "step failed: " << st.ToString();
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.errors;
    stats_.last_error = absl::StrCat("step failed: ", st.ToString());
    for (const auto& e : step.plan.entries) {
      Seq& s = *active_[e.index];
      EndSeq(s, EndReason::kError, st, out);
      ForgetLocked(s);
      active_[e.index].reset();
    }
  } else {
    int64_t produced = 0;
    for (size_t k = 0; k < step.plan.entries.size(); ++k) {
      const PlanEntry& e = step.plan.entries[k];
      Seq& s = *active_[e.index];
      s.fed.insert(s.fed.end(), step.tokens[k].begin(), step.tokens[k].end());
      if (step.in[e.index].prefill_remaining > 0) s.prompt_fed += e.tokens;
      if (!e.samples) continue;
      // Rows drawn in order as plain decode steps would draw them, until one differs from its draft.
      const int64_t fed_from = s.state->length() - static_cast<int64_t>(step.tokens[k].size());
      DrawCtx c;
      c.fed_from = fed_from;
      const float* rows = step.items[k].logits;
      const Acceptance a =
          AcceptDrafts(s.drafts, [&](int row) { return DrawRow(s, rows + static_cast<int64_t>(row) * V, c); });
      if (!s.drafts.empty()) {
        // Roll back the rejected rows: the state holds the fed last token and the accepted drafts.
        const int64_t keep = fed_from + a.drawn;
        if (absl::Status t = model_->Truncate(*s.state, keep); !t.ok() && c.error.ok()) c.error = t;
        s.fed.resize(keep);
        if (s.used != DraftSource::kNone) {
          s.choosers.Credit(s.used, static_cast<int>(s.drafts.size()), a.accepted);
        }
      }
      if (step.in[e.index].prefill_remaining == 0) {
        s.spec.Record(static_cast<int>(s.drafts.size()), a.accepted, static_cast<int>(c.out.tokens.size()));
        std::lock_guard<std::mutex> lock(mu_);
        stats_.spec.Record(static_cast<int>(s.drafts.size()), a.accepted, static_cast<int>(c.out.tokens.size()));
      }
      produced += static_cast<int64_t>(c.out.tokens.size());
      if (!c.error.ok()) {
        // The sampler drew outside the mask (a bug), or the rollback failed: never a silent invalid output.
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.errors;
        stats_.last_error = c.error.ToString();
        EndSeq(s, EndReason::kError, c.error, out);
        ForgetLocked(s);
        active_[e.index].reset();
        continue;
      }
      SeqOutput o = std::move(c.out);
      bool cancelled;
      {
        std::lock_guard<std::mutex> lock(mu_);
        cancelled = s.cancel;  // came during the step: its tokens are not delivered
      }
      if (cancelled) continue;  // dropped (and reported) at the top of the next loop
      if (c.stop || c.length) {
        o.finished = true;
        o.reason = c.stop ? EndReason::kStop : EndReason::kLength;
        o.prompt_tokens = static_cast<int32_t>(s.req.prompt.size());
        o.completion_tokens = static_cast<int32_t>(s.generated.size());
        o.cached_prompt_tokens = static_cast<int32_t>(s.cached);
        o.accepted_prediction_tokens = static_cast<int32_t>(s.spec.accepted);
        o.rejected_prediction_tokens = static_cast<int32_t>(s.spec.drafted - s.spec.accepted);
        out->emplace_back(s.cb, std::move(o));
        // Keep its KV for prefix reuse (fed tokens only; the last sampled is not in the KV).
        std::shared_ptr<const SeqState> state(std::move(s.state));
        prefix_.Insert(s.fed, state);
        std::lock_guard<std::mutex> lock(mu_);
        ForgetLocked(s);
        active_[e.index].reset();
      } else {
        out->emplace_back(s.cb, std::move(o));
      }
    }
    auto now = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> lock(mu_);
    stats_.generated += produced;
    step.produced = produced;
    rate_window_.emplace_back(now, stats_.generated);
    while (rate_window_.size() > 2 && now - rate_window_.front().first > std::chrono::seconds(5)) {
      rate_window_.pop_front();
    }
    double dt = std::chrono::duration<double>(now - rate_window_.front().first).count();
    stats_.tokens_per_second = dt > 0 ? (stats_.generated - rate_window_.front().second) / dt : 0;
    int waiting = 0;
    int64_t kv = 0;
    for (auto& s : active_) {
      if (s && s->prompt_fed < static_cast<int64_t>(s->req.prompt.size())) ++waiting;
      if (s && s->state) kv += s->state->bytes();
    }
    stats_.waiting = waiting;
    stats_.kv_bytes = kv;
    stats_.prefix_cache_bytes = prefix_.bytes();
    stats_.prefix_cache_entries = static_cast<int64_t>(prefix_.size());
    stats_.prefix = prefix_.stats();
  }
}

}  // namespace moe::inferd
