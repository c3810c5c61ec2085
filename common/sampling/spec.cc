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
                                                   const DepthChooser& costs, int64_t base_rows, DraftSource* used) {
  return ProposeDrafts(mode, room, history, mtp, choosers, costs, base_rows, used, AllowedDrafters{});
}

absl::StatusOr<std::vector<int32_t>> ProposeDrafts(SpecMode mode, int room, std::span<const int32_t> history,
                                                   const MtpDraftFn& mtp_fn, AutoChoosers& choosers,
                                                   const DepthChooser& costs, int64_t base_rows, DraftSource* used,
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
  std::vector<int32_t> d = NgramDraft(history, room);
  if (mode == SpecMode::kNgram) {
    if (!d.empty()) *used = DraftSource::kNgram;
    return d;
  }
  // auto
  if (!allowed.ngram) d.clear();
  const DepthChooser::Pick ng =
      d.empty() ? DepthChooser::Pick{} : choosers.ngram.Best(static_cast<int>(d.size()), base_rows, &costs);
  const DepthChooser::Pick mt = mtp ? choosers.mtp.Best(room, base_rows, &costs) : DepthChooser::Pick{};
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
  return (a + 1.0) / (d + 2.0);
}

void DepthChooser::ObserveStep(int64_t rows, double seconds) {
  if (rows < 1 || seconds <= 0) return;
  if (static_cast<int64_t>(seconds_by_rows_.size()) <= rows) seconds_by_rows_.resize(rows + 1, 0.0);
  double& s = seconds_by_rows_[rows];
  s = s == 0 ? seconds : 0.8 * s + 0.2 * seconds;
}

double DepthChooser::Cost(int64_t rows) const {
  if (rows < static_cast<int64_t>(seconds_by_rows_.size()) && seconds_by_rows_[rows] > 0) {
    return seconds_by_rows_[rows];
  }
  // Not measured: from the nearest measured smaller step of r rows, at least 10% of its cost per row
  // more per row (optimistic, so it is tried: 10% of a plain step alone, 1.25% of an 8-sequence one),
  // or the measured cost per row between it and the next smaller measured step when that is more (a
  // compute-bound worker, whose rows each cost about a step: drafts are then not tried blindly). The
  // DraftGuard stops a trial that does not pay.
  for (int64_t r = std::min<int64_t>(rows, static_cast<int64_t>(seconds_by_rows_.size()) - 1); r >= 1; --r) {
    if (seconds_by_rows_[r] <= 0) continue;
    double per_row = 0.1 * seconds_by_rows_[r] / static_cast<double>(r);
    for (int64_t q = r - 1; q >= 1; --q) {
      if (seconds_by_rows_[q] > 0) {
        per_row = std::max(per_row, (seconds_by_rows_[r] - seconds_by_rows_[q]) / static_cast<double>(r - q));
        break;
      }
    }
    return seconds_by_rows_[r] + per_row * static_cast<double>(rows - r);
  }
  return -1;  // nothing at or below `rows` measured
}

void DepthChooser::ObserveDraft(int drafted, double seconds) {
  if (drafted < 1 || seconds < 0) return;
  const double per = seconds / drafted;
  draft_seconds_ = draft_seconds_ == 0 ? per : 0.8 * draft_seconds_ + 0.2 * per;
}

DepthChooser::Pick DepthChooser::Best(int max_k, int64_t base_rows, const DepthChooser* costs) const {
  const DepthChooser& cc = costs ? *costs : *this;
  Pick best;
  // A plain step of this size was never measured: take one (the reference every depth is weighed against).
  if (cc.Cost(base_rows + 1) <= 0) return best;
  // The step's tokens per second, not this sequence's alone: the rows already planned (other
  // sequences' decode rows, ~1 token each) are delayed by this sequence's drafts too, so in a batched,
  // compute-bound step a draft row must pay for everybody's wait.
  const double others = static_cast<double>(base_rows);
  const double rate0 = (others + 1.0) / cc.Cost(base_rows + 1);
  double best_rate = rate0, expect = 1.0, chain = 1.0;
  for (int k = 1; k <= max_k; ++k) {
    // Depths are explored one at a time, shallowest first: a deeper step is weighed only once the
    // step one row shorter was measured (a trial costs one extra row, not K: at a 10% expert cache
    // each verify row reads ~its own experts, and a K-row trial alone lost 10% of a 32-token run).
    if (k > 1 && !cc.Measured(base_rows + k)) break;
    chain *= Acceptance(k - 1);
    expect += chain;
    const double rate = (others + expect) / (cc.Cost(base_rows + 1 + k) + draft_seconds_ * k);
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
