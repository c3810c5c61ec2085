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
// (accepted / drafted, with a prior of 1 accepted in 2), and the measured
// cost of a step by the rows it feeds (seconds, exponential moving average).
// Choose(max_k, base_rows) returns the k in 0..max_k that maximizes the step's
// expected tokens per second, the base_rows rows already planned (other
// sequences' rows) counted as a token each: (base_rows + 1 + sum_j prod_{i<=j}
// a_i) / T(base_rows + k + 1), against (base_rows + 1) / T(base_rows + 1);
// 0 unless a draft is expected to pay, and 0 until a plain step of that size
// was measured. Depths never measured are tried once, shallowest first (a
// depth is weighed only once the step one row shorter was measured; cost assumed
// the nearest measured smaller step's plus, per extra row, the larger of 10%
// of its cost per row and the measured cost per row below it), so a depth whose
// verify reads many uncached experts (or, compute-bound, costs a row each) is
// measured and then avoided. `costs`: another chooser
// whose step costs to use (inferd: the worker's, measured over whole steps;
// each sequence keeps its own acceptance); null = this one's.
// The drafter's own time counts too (ObserveDraft: seconds per draft token,
// the MTP layer's forwards; prompt lookup costs nothing).
class DepthChooser {
 public:
  void ObserveAcceptance(int drafted, int accepted);
  void ObserveStep(int64_t rows, double seconds);
  void ObserveDraft(int drafted, double seconds);
  struct Pick {
    int k = 0;
    double gain = 1.0;  // expected tokens per second over a plain step's
  };
  Pick Best(int max_k, int64_t base_rows, const DepthChooser* costs = nullptr) const;
  int Choose(int max_k, int64_t base_rows, const DepthChooser* costs = nullptr) const {
    return Best(max_k, base_rows, costs).k;
  }
  double Acceptance(int position) const;
  // Whether a step of `rows` rows was measured.
  bool Measured(int64_t rows) const {
    return rows >= 1 && rows < static_cast<int64_t>(seconds_by_rows_.size()) && seconds_by_rows_[rows] > 0;
  }

 private:
  double Cost(int64_t rows) const;
  std::vector<int64_t> drafted_at_, accepted_at_;
  std::vector<double> seconds_by_rows_;  // 0: not measured
  double draft_seconds_ = 0;             // per draft token (EMA)
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
// the MTP layer's time per draft) and `costs` (verify steps by rows fed;
// base_rows: rows already in the step), none unless it pays; *used says which
// source drafted (credit its chooser with the verify's acceptance). auto only:
// `allowed` says which drafters the DraftGuard lets through this step.
using MtpDraftFn = std::function<absl::StatusOr<std::vector<int32_t>>(int k)>;
struct AutoChoosers {
  DepthChooser ngram, mtp;
  DepthChooser& For(DraftSource s) { return s == DraftSource::kMtp ? mtp : ngram; }
};
absl::StatusOr<std::vector<int32_t>> ProposeDrafts(SpecMode mode, int room, std::span<const int32_t> history,
                                                   const MtpDraftFn& mtp, AutoChoosers& choosers,
                                                   const DepthChooser& costs, int64_t base_rows, DraftSource* used);
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
                                                   const DepthChooser& costs, int64_t base_rows, DraftSource* used,
                                                   AllowedDrafters allowed);

}  // namespace moe
