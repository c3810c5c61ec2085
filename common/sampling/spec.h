// Speculative decoding, the token side (docs/SERVING.md, "Speculative
// decoding"): the modes, the lossless acceptance rule, the statistics, and
// the cost-aware choice of the draft depth. Drafters: spec_ngram.h (prompt
// lookup), common/model/spec_mtp.h (the MTP layer), TokenConstraint's
// ForcedToken (structured outputs).
//
// Acceptance (AcceptDrafts): every draft here is deterministic (one-hot q:
// n-gram, forced and greedy MTP drafts), so the speculative-sampling rule
// "accept with min(1, p/q), else draw from the residual" reduces to: draw the
// target's token of verify row i exactly as a plain decode step would (same
// sampler, same keyed draw KeyedRng(seed, output index)), accept draft i when
// they are equal, stop at the first that differs (that drawn token is the
// step's bonus). The output is then token for token the one without
// speculation, greedy or seeded.
// Thread safety: SpecStats and DepthChooser belong to one sequence / loop.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace moe {

enum class SpecMode { kOff, kMtp, kNgram, kAuto };
// "off" | "mtp" | "ngram" | "auto"; anything else refused naming the value.
absl::StatusOr<SpecMode> ParseSpecMode(std::string_view name);
std::string_view SpecModeName(SpecMode m);
inline constexpr int kMaxDraftTokens = 8;

struct SpecOptions {
  SpecMode mode = SpecMode::kOff;
  int draft_tokens = 3;  // K, the most drafts per step (1..kMaxDraftTokens)
};
// OK or InvalidArgument naming --draft-tokens.
absl::Status CheckSpecOptions(const SpecOptions& o);

// Counters of one sequence or of a whole worker.
struct SpecStats {
  int64_t steps = 0;     // decode steps (verify or plain)
  int64_t tokens = 0;    // tokens they produced
  int64_t drafted = 0, accepted = 0;
  std::vector<int64_t> drafted_at, accepted_at;  // per draft position (0 = first draft)
  void Record(int drafted_now, int accepted_now, int tokens_now);
  void Add(const SpecStats& o);
  double TokensPerStep() const { return steps ? static_cast<double>(tokens) / steps : 0.0; }
};

struct Acceptance {
  int drawn = 0;     // tokens drawn (accepted drafts + the bonus / the stopping token)
  int accepted = 0;  // drafts equal to the token drawn at their row
};
// draw(row): draws the target's token of verify row `row` (0..drafts.size()),
// records it as the sequence's next output token, and returns it, or -1 when
// the sequence ended with it (stop token, length, error). Rows are drawn in
// order until one differs from its draft or the sequence ends.
Acceptance AcceptDrafts(std::span<const int32_t> drafts, const std::function<int32_t(int row)>& draw);


// --speculative auto's depth: per draft position the acceptance rate
// (accepted / drafted, with a prior: SetPrior), and the measured cost of a pure
// decode step of n decoding sequences: plain (n rows, exponential moving
// average) and, from steps that fed drafts, T(n) + v(n) * s + r(n) * k for a
// step where s sequences fed k drafts in all: v is what a sequence's verify
// costs at all (its multi-row forward path, drawing and rolling back), r each
// draft row (fitted by least squares with forgetting; through the demo model's
// stack at 8 sequences v ~1 ms, r ~0.5 ms). A draft is priced by steps with
// drafts only, never by plain steps of more sequences: a sequence costs its
// serving work too (sampling, delivery, gRPC; ~1 ms a sequence there), and
// steps carrying prompt chunks are not observed at all.
// Choose(max_k, n, base_rows) returns the k in 0..max_k that maximizes the
// step's expected tokens per second, the base_rows rows already planned
// (other sequences' rows, drafts included) counted as a token each:
// (base_rows + 1 + sum_j prod_{i<=j} a_i) / (T0 + v + r k), against
// (base_rows + 1) / T0, T0 = T(n) + r (base_rows + 1 - n); 0 unless a draft is
// expected to pay (2% margin), and 0 until a plain step at n was measured.
// Exploration, shallowest first: with nothing measured at n (nor at the
// nearest n' that has a fit) v = 0 and r = 10% of a plain row (optimistic:
// depth 1 is tried); a depth at most one deeper than any measured is weighed;
// while the measured steps cannot tell v from r (every one drafted the same
// depth), r is taken as the smaller of the prior and the whole measured cost
// per row, v as the rest (the next depth is then tried once and measured). A
// depth whose verify reads many uncached experts (or, compute-bound, costs a
// row each) is so measured and then avoided. Figures older than kStaleSteps
// observed steps count as unmeasured (a noisy trial is retried, not trusted
// forever). `costs`: another chooser whose step costs to use (inferd: the
// worker's, measured over whole steps; each sequence keeps its own
// acceptance); null = this one's. The drafter's own time counts too
// (ObserveDraft: seconds per draft token, the MTP layer's forwards; prompt
// lookup costs nothing).
class DepthChooser {
 public:
  void ObserveAcceptance(int drafted, int accepted);
  // A pure decode step of plain_rows decoding sequences that fed `rows` rows (rows - plain_rows drafts),
  // `drafting` of the sequences feeding drafts (default: one, when there are drafts).
  void ObserveStep(int64_t plain_rows, int64_t rows, double seconds, int64_t drafting = -1);
  void ObserveDraft(int drafted, double seconds);
  struct Pick {
    int k = 0;
    double gain = 1.0;  // expected tokens per second over a plain step's
  };
  Pick Best(int max_k, int64_t plain_rows, int64_t base_rows, const DepthChooser* costs = nullptr) const;
  int Choose(int max_k, int64_t plain_rows, int64_t base_rows, const DepthChooser* costs = nullptr) const {
    return Best(max_k, plain_rows, base_rows, costs).k;
  }
  // Acceptance at a draft position: (accepted + m * P) / (drafted + m) with m = kPriorWeight drafts
  // and P the prior's acceptance there (SetPrior: the worker's pool of every sequence's verifies), or
  // 1/2 without one. A sequence that has drafted little is judged mostly by what its worker saw.
  double Acceptance(int position) const;
  static constexpr double kPriorWeight = 2.0;
  void SetPrior(const DepthChooser* prior) { prior_ = prior; }
  static constexpr int64_t kStaleSteps = 256;
  // Whether a plain step of n sequences / a step with drafts at n was observed within the last
  // kStaleSteps steps.
  bool Measured(int64_t n) const { return n >= 1 && n < static_cast<int64_t>(plain_.size()) && Fresh(plain_[n].at); }
  bool RowMeasured(int64_t n) const { return n >= 1 && n < static_cast<int64_t>(fit_.size()) && Fresh(fit_[n].at); }
  // Seconds of a step of n sequences feeding `rows` rows, `drafting` of them with drafts (default:
  // one when rows > n); -1 while a plain step at n is unmeasured.
  double Cost(int64_t n, int64_t rows, int64_t drafting = -1) const;

 private:
  struct Ema {
    double value = 0;
    int64_t at = -1;  // steps_ when last observed
  };
  // Least squares of d = v s + r k over the steps with drafts at one n (decayed sums).
  struct Fit {
    double ss = 0, sk = 0, kk = 0, sd = 0, kd = 0;
    int64_t depth = 0;  // the deepest draft per sequence measured (ceil(k / s))
    int64_t at = -1;
  };
  struct RowPrice {
    double v = 0, r = 0;
    int64_t depth = 0;  // measured up to this depth (0: the prior)
  };
  bool Fresh(int64_t at) const { return at >= 0 && steps_ - at <= kStaleSteps; }
  RowPrice Price(int64_t n) const;
  std::vector<int64_t> drafted_at_, accepted_at_;
  const DepthChooser* prior_ = nullptr;  // not owned; outlives this one
  std::vector<Ema> plain_;  // by n: seconds of a plain step
  std::vector<Fit> fit_;    // by n: the steps with drafts, beyond plain(n)
  int64_t steps_ = 0;       // steps observed
  double draft_seconds_ = 0;  // per draft token (EMA)
};

// Which drafter proposed a sequence's drafts (kNone: no drafts, or forced tokens only).
enum class DraftSource { kNone, kNgram, kMtp };

// --speculative auto's safety net: the throughput actually realized. The
// DepthChooser predicts from per-row step costs, which go stale and are noisy
// (a step of 10 rows once measured faster than an old 8-row one looks like a
// free draft); the guard compares what whole steps really delivered, seconds
// per produced token (drafting, forward and drawing included), between steps
// with drafts and plain steps of the same number of decoding sequences n, and
// blocks that drafter at n while its steps are the slower ones. Each drafter
// (prompt lookup, the MTP layer) is judged on its own: a step counts for MTP
// when any of its drafts came from the MTP layer, else for lookup. Rules:
//  * Allow(n, source) is false while no plain step at n was measured within
//    the last kFreshSteps steps (take one: the reference is then fresh), and
//    while (n, source) is blocked.
//  * Observe(n, source, tokens, seconds) after each pure decode step (steps
//    with prefill rows are not comparable and are not observed; kNone =
//    plain). Each side keeps decayed sums of seconds and tokens (a ratio of
//    sums: robust to one slow step). MTP steps count with the MTP layer's
//    catch-up over the positions it skipped (a real cost of starting it: at 8
//    demo-model sequences a probe's catch-ups cost more than its drafts gain).
//    Once a drafter's side has kMinSamples since its last verdict and
//    its seconds per token exceed the plain side's by kMargin, (n, source) is blocked
//    for a back-off (kFirstBackoff steps, doubling up to kMaxBackoff while the
//    verdict repeats, reset when drafting wins); that side then starts over,
//    so the probe after the back-off measures afresh.
// So where no draft pays, auto loses at most the probes (a few steps per
// back-off) and the plain step it takes every kFreshSteps; where drafts pay,
// one plain step in kFreshSteps. Forced tokens are not guarded (always
// accepted). One per worker loop / Generate call; not thread-safe.
class DraftGuard {
 public:
  static constexpr int64_t kFreshSteps = 64, kMinSamples = 8, kFirstBackoff = 32, kMaxBackoff = 2048;
  // A drafter is blocked when its steps cost more than this times the plain steps' seconds per token:
  // a step's loop period varies +-10-20% (2 vCPUs shared with the serving threads), and a draft row
  // in a batch of 8 gains ~5%, which a verdict without a margin would reject on noise.
  static constexpr double kMargin = 1.02;
  bool Allow(int64_t n, DraftSource source) const;
  void Observe(int64_t n, DraftSource source, int64_t tokens, double seconds);
  int64_t blocks() const { return blocks_; }  // verdicts against a drafter so far

 private:
  struct Side {
    double seconds = 0, tokens = 0;  // decayed sums
    int64_t samples = 0;             // since the last verdict
    int64_t last_step = -1;
    int64_t blocked_until = -1, backoff = kFirstBackoff;  // drafter sides
    double SecondsPerToken() const { return tokens > 0 ? seconds / tokens : 0; }
  };
  struct Bucket {
    Side plain, ngram, mtp;
    Side& For(DraftSource s) { return s == DraftSource::kMtp ? mtp : s == DraftSource::kNgram ? ngram : plain; }
    const Side& For(DraftSource s) const { return const_cast<Bucket*>(this)->For(s); }
  };
  std::vector<Bucket> by_n_;
  int64_t step_ = 0, blocks_ = 0;
};

// The drafts of one step: `history` = every token of the sequence so far
// (prompt, output, and the token about to be fed last); mtp(k) = up to k MTP
// drafts (null: the sequence has none). ngram: prompt lookup; mtp: the MTP
// layer, `room` drafts each. auto: the source and depth with the best expected
// gain from the sequence's own choosers (per source: acceptance per position,
// the MTP layer's time per draft) and `costs` (step costs; plain_rows: the
// step's decoding sequences, base_rows: rows already in the step), none unless it pays; *used says which
// source drafted (credit its chooser with the verify's acceptance). auto only:
// `allowed` says which drafters the DraftGuard lets through this step.
using MtpDraftFn = std::function<absl::StatusOr<std::vector<int32_t>>(int k)>;
// Lookup drafts are weighed by the length of the suffix they matched (1, 2, 3, 4+ tokens: a long match
// is accepted far more often than a one-token one); `match` is the last lookup's, the chooser its
// verify credits. A sequence's choosers take the worker's pooled ones as their prior (Pool).
struct AutoChoosers {
  static constexpr int kMatchBuckets = 4;
  DepthChooser ngram[kMatchBuckets], mtp;
  int match = 1;
  AutoChoosers* pool = nullptr;  // not owned: every verify is credited there too
  static int Bucket(int match) { return std::clamp(match, 1, kMatchBuckets) - 1; }
  DepthChooser& For(DraftSource s) { return s == DraftSource::kMtp ? mtp : ngram[Bucket(match)]; }
  // Take `p`'s acceptance as this one's prior and credit it with this one's verifies.
  void Pool(AutoChoosers* p) {
    pool = p;
    for (int i = 0; i < kMatchBuckets; ++i) ngram[i].SetPrior(&p->ngram[i]);
    mtp.SetPrior(&p->mtp);
  }
  // A verify of `drafted` drafts from `s` (the last lookup's match length for kNgram) accepted `accepted`.
  void Credit(DraftSource s, int drafted, int accepted) {
    if (s == DraftSource::kNone) return;
    For(s).ObserveAcceptance(drafted, accepted);
    if (pool) {
      pool->match = match;
      pool->For(s).ObserveAcceptance(drafted, accepted);
    }
  }
};
absl::StatusOr<std::vector<int32_t>> ProposeDrafts(SpecMode mode, int room, std::span<const int32_t> history,
                                                   const MtpDraftFn& mtp, AutoChoosers& choosers,
                                                   const DepthChooser& costs, int64_t plain_rows, int64_t base_rows, DraftSource* used);
struct AllowedDrafters {
  bool ngram = true, mtp = true;
};
// auto offers MTP drafts to a sequence only while its MTP drafter is at most
// this many positions behind it (or on its first decode step, whose catch-up is
// the prompt's, paid once): starting the MTP layer late means running it over
// every position it skipped, which at 8 demo-model sequences cost more than
// the drafts gained (docs/BENCHMARKS.md "speculative decoding").
inline constexpr int64_t kMaxMtpCatchUp = 32;
absl::StatusOr<std::vector<int32_t>> ProposeDrafts(SpecMode mode, int room, std::span<const int32_t> history,
                                                   const MtpDraftFn& mtp, AutoChoosers& choosers,
                                                   const DepthChooser& costs, int64_t plain_rows, int64_t base_rows, DraftSource* used,
                                                   AllowedDrafters allowed);

}  // namespace moe
