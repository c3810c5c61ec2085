#include "common/sampling/spec.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/sampling/spec_ngram.h"

namespace moe {

absl::StatusOr<SpecMode> ParseSpecMode(std::string_view name) {
  if (name == "off") return SpecMode::kOff;
  if (name == "mtp") return SpecMode::kMtp;
  if (name == "ngram") return SpecMode::kNgram;
  if (name == "auto") return SpecMode::kAuto;
  return absl::InvalidArgumentError(
      absl::StrCat("--speculative must be off, mtp, ngram or auto, got \"", std::string(name), "\""));
}

std::string_view SpecModeName(SpecMode m) {
  switch (m) {
    case SpecMode::kOff:
      return "off";
    case SpecMode::kMtp:
      return "mtp";
    case SpecMode::kNgram:
      return "ngram";
    case SpecMode::kAuto:
      break;
  }
  return "auto";
}

absl::Status CheckSpecOptions(const SpecOptions& o) {
  if (o.draft_tokens < 1 || o.draft_tokens > kMaxDraftTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("--draft-tokens must be in 1..", kMaxDraftTokens, ", got ", o.draft_tokens));
  }
  return absl::OkStatus();
}

void SpecStats::Record(int drafted_now, int accepted_now, int tokens_now) {
  ++steps;
  tokens += tokens_now;
  drafted += drafted_now;
  accepted += accepted_now;
  if (static_cast<int>(drafted_at.size()) < drafted_now) {
    drafted_at.resize(drafted_now, 0);
    accepted_at.resize(drafted_now, 0);
  }
  for (int i = 0; i < drafted_now; ++i) ++drafted_at[i];
  for (int i = 0; i < accepted_now; ++i) ++accepted_at[i];
}

void SpecStats::Add(const SpecStats& o) {
  steps += o.steps;
  tokens += o.tokens;
  drafted += o.drafted;
  accepted += o.accepted;
  if (drafted_at.size() < o.drafted_at.size()) {
    drafted_at.resize(o.drafted_at.size(), 0);
    accepted_at.resize(o.drafted_at.size(), 0);
  }
  for (size_t i = 0; i < o.drafted_at.size(); ++i) {
    drafted_at[i] += o.drafted_at[i];
    accepted_at[i] += o.accepted_at[i];
  }
}

Acceptance AcceptDrafts(std::span<const int32_t> drafts, const std::function<int32_t(int row)>& draw) {
  Acceptance a;
  for (int row = 0; row <= static_cast<int>(drafts.size()); ++row) {
    const int32_t t = draw(row);
    ++a.drawn;
    const bool match = row < static_cast<int>(drafts.size()) && t >= 0 && t == drafts[row];
    if (match) ++a.accepted;
    if (t < 0 || !match) break;
  }
  return a;
}

absl::StatusOr<std::vector<int32_t>> ProposeDrafts(SpecMode mode, int room, std::span<const int32_t> history,
                                                   const MtpDraftFn& mtp, AutoChoosers& choosers,
                                                   const DepthChooser& costs, int64_t plain_rows, int64_t base_rows, DraftSource* used) {
  return ProposeDrafts(mode, room, history, mtp, choosers, costs, plain_rows, base_rows, used, AllowedDrafters{});
}

absl::StatusOr<std::vector<int32_t>> ProposeDrafts(SpecMode mode, int room, std::span<const int32_t> history,
                                                   const MtpDraftFn& mtp_fn, AutoChoosers& choosers,
                                                   const DepthChooser& costs, int64_t plain_rows, int64_t base_rows, DraftSource* used,
                                                   AllowedDrafters allowed) {
  *used = DraftSource::kNone;
  if (mode == SpecMode::kAuto && !allowed.ngram && !allowed.mtp) return std::vector<int32_t>{};
  const MtpDraftFn no_mtp;
  const MtpDraftFn& mtp = mode == SpecMode::kAuto && !allowed.mtp ? no_mtp : mtp_fn;
  if (room < 1 || mode == SpecMode::kOff) return std::vector<int32_t>{};
  auto run_mtp = [&](int k) -> absl::StatusOr<std::vector<int32_t>> {
    const auto t0 = std::chrono::steady_clock::now();
    auto d = mtp(k);
    if (d.ok() && !d->empty()) {
      *used = DraftSource::kMtp;
      choosers.mtp.ObserveDraft(static_cast<int>(d->size()),
                                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return d;
  };
  if (mode == SpecMode::kMtp) return mtp ? run_mtp(room) : std::vector<int32_t>{};
  int matched = 0;
  std::vector<int32_t> d = NgramDraft(history, room, 4, &matched);
  if (!d.empty()) choosers.match = matched;
  if (mode == SpecMode::kNgram) {
    if (!d.empty()) *used = DraftSource::kNgram;
    return d;
  }
  // auto
  if (!allowed.ngram) d.clear();
  const DepthChooser::Pick ng =
      d.empty() ? DepthChooser::Pick{} : choosers.For(DraftSource::kNgram).Best(static_cast<int>(d.size()), plain_rows, base_rows, &costs);
  const DepthChooser::Pick mt = mtp ? choosers.mtp.Best(room, plain_rows, base_rows, &costs) : DepthChooser::Pick{};
  if (mt.k > 0 && mt.gain > ng.gain) return run_mtp(mt.k);
  if (ng.k == 0) return std::vector<int32_t>{};
  d.resize(ng.k);
  *used = DraftSource::kNgram;
  return d;
}

void DepthChooser::ObserveAcceptance(int drafted, int accepted) {
  if (static_cast<int>(drafted_at_.size()) < drafted) {
    drafted_at_.resize(drafted, 0);
    accepted_at_.resize(drafted, 0);
  }
  // Position i was only "tried" when every draft before it was accepted.
  for (int i = 0; i < drafted && i <= accepted; ++i) ++drafted_at_[i];
  for (int i = 0; i < accepted; ++i) ++accepted_at_[i];
}

double DepthChooser::Acceptance(int position) const {
  const double d = position < static_cast<int>(drafted_at_.size()) ? drafted_at_[position] : 0;
  const double a = position < static_cast<int>(accepted_at_.size()) ? accepted_at_[position] : 0;
  const double prior = prior_ ? prior_->Acceptance(position) : 0.5;
  return (a + kPriorWeight * prior) / (d + kPriorWeight);
}

void DepthChooser::ObserveStep(int64_t plain_rows, int64_t rows, double seconds, int64_t drafting) {
  const int64_t n = plain_rows, k = rows - plain_rows;
  if (n < 1 || k < 0 || seconds <= 0) return;
  if (drafting < 0) drafting = k > 0 ? 1 : 0;
  if (k > 0 && (drafting < 1 || drafting > k)) return;  // inconsistent: not a step this chooser can price
  ++steps_;
  if (k == 0) {
    if (static_cast<int64_t>(plain_.size()) <= n) plain_.resize(n + 1);
    Ema& e = plain_[n];
    // Never observed, or stale: start afresh rather than average with an old figure.
    e.value = Fresh(e.at) ? 0.8 * e.value + 0.2 * seconds : seconds;
    e.at = steps_;
    return;
  }
  if (!Measured(n)) return;
  if (static_cast<int64_t>(fit_.size()) <= n) fit_.resize(n + 1);
  Fit& f = fit_[n];
  if (!Fresh(f.at)) f = Fit{};
  constexpr double kKeep = 0.95;  // forgetting: ~20 steps with drafts decide
  const double s = static_cast<double>(drafting), kr = static_cast<double>(k);
  const double d = seconds - plain_[n].value;
  f.ss = kKeep * f.ss + s * s;
  f.sk = kKeep * f.sk + s * kr;
  f.kk = kKeep * f.kk + kr * kr;
  f.sd = kKeep * f.sd + s * d;
  f.kd = kKeep * f.kd + kr * d;
  f.depth = std::max(f.depth, (k + drafting - 1) / drafting);
  f.at = steps_;
}

DepthChooser::RowPrice DepthChooser::Price(int64_t n) const {
  const double prior_r = 0.1 * plain_[n].value / static_cast<double>(n);
  // Measured at n, else at the nearest n' with a fit (a verify costs about alike at neighbouring batch
  // sizes), else the optimistic prior.
  const Fit* f = nullptr;
  for (int64_t d = 0; d < static_cast<int64_t>(fit_.size()) && !f; ++d) {
    for (const int64_t m : {n - d, n + d}) {
      if (RowMeasured(m)) {
        f = &fit_[m];
        break;
      }
    }
  }
  RowPrice p;
  if (!f) {
    p.r = prior_r;
    return p;
  }
  p.depth = f->depth;
  const double det = f->ss * f->kk - f->sk * f->sk;
  if (det > 1e-6 * f->ss * f->kk) {
    p.v = (f->sd * f->kk - f->kd * f->sk) / det;
    p.r = (f->kd * f->ss - f->sd * f->sk) / det;
    // A noisy fit can come out negative on one side: refit the other alone.
    if (p.v < 0) {
      p.v = 0;
      p.r = f->kd / f->kk;
    } else if (p.r < 0) {
      p.r = 0;
      p.v = f->sd / f->ss;
    }
  } else {
    // Every step drafted k = a s: only v + a r is known. r: the smaller of the prior and the whole cost.
    const double a = f->sk / f->ss, c = f->sd / f->ss;  // per drafting sequence
    p.r = std::min(prior_r, std::max(0.0, c) / a);
    p.v = c - a * p.r;
  }
  p.v = std::max(0.0, p.v);
  p.r = std::max(0.0, p.r);
  return p;
}

double DepthChooser::Cost(int64_t n, int64_t rows, int64_t drafting) const {
  if (!Measured(n) || rows < n) return -1;
  if (drafting < 0) drafting = rows > n ? 1 : 0;
  const RowPrice p = Price(n);
  return plain_[n].value + p.v * static_cast<double>(drafting) + p.r * static_cast<double>(rows - n);
}

void DepthChooser::ObserveDraft(int drafted, double seconds) {
  if (drafted < 1 || seconds < 0) return;
  const double per = seconds / drafted;
  draft_seconds_ = draft_seconds_ == 0 ? per : 0.8 * draft_seconds_ + 0.2 * per;
}

DepthChooser::Pick DepthChooser::Best(int max_k, int64_t plain_rows, int64_t base_rows,
                                      const DepthChooser* costs) const {
  const DepthChooser& cc = costs ? *costs : *this;
  Pick best;
  // A plain step of this size was never measured: take one (the reference every depth is weighed against).
  const double t0 = cc.Cost(plain_rows, base_rows + 1, 0);
  if (t0 <= 0) return best;
  const RowPrice price = cc.Price(plain_rows);
  // The step's tokens per second, not this sequence's alone: the rows already planned (other
  // sequences' decode rows, ~1 token each) are delayed by this sequence's drafts too, so in a batched,
  // compute-bound step a draft row must pay for everybody's wait.
  const double others = static_cast<double>(base_rows);
  const double rate0 = (others + 1.0) / t0;
  double best_rate = rate0, expect = 1.0, chain = 1.0;
  for (int k = 1; k <= max_k; ++k) {
    // Depths are explored one at a time, shallowest first: at most one deeper than any measured (a
    // trial costs one extra row, not K: at a 10% expert cache each verify row reads ~its own experts,
    // and a K-row trial alone lost 10% of a 32-token run).
    if (k > price.depth + 1) break;
    chain *= Acceptance(k - 1);
    expect += chain;
    const double rate = (others + expect) / (t0 + price.v + price.r * k + draft_seconds_ * k);
    if (rate > best_rate * 1.02) {  // 2% margin: a depth must clearly pay
      best_rate = rate;
      best.k = k;
    }
  }
  best.gain = best_rate / rate0;
  return best;
}

bool DraftGuard::Allow(int64_t n, DraftSource source) const {
  if (n < 1 || n >= static_cast<int64_t>(by_n_.size())) return false;  // no plain step at n yet
  const Bucket& b = by_n_[n];
  if (b.plain.last_step < 0 || step_ - b.plain.last_step > kFreshSteps) return false;
  return source == DraftSource::kNone || step_ >= b.For(source).blocked_until;
}

void DraftGuard::Observe(int64_t n, DraftSource source, int64_t tokens, double seconds) {
  if (n < 1 || tokens < 1 || seconds <= 0) return;
  ++step_;
  if (static_cast<int64_t>(by_n_.size()) <= n) by_n_.resize(n + 1);
  Bucket& b = by_n_[n];
  Side& side = b.For(source);
  side.seconds = 0.9 * side.seconds + seconds;
  side.tokens = 0.9 * side.tokens + static_cast<double>(tokens);
  ++side.samples;
  side.last_step = step_;
  if (source == DraftSource::kNone || side.samples < kMinSamples || b.plain.samples < 1) return;
  int64_t backoff = kFirstBackoff, blocked_until = -1;
  if (side.SecondsPerToken() > kMargin * b.plain.SecondsPerToken()) {
    blocked_until = step_ + side.backoff;
    backoff = std::min(kMaxBackoff, 2 * side.backoff);
    ++blocks_;
  }
  side = Side{};  // the next verdict is on fresh drafted steps
  side.blocked_until = blocked_until;
  side.backoff = backoff;
}

}  // namespace moe
