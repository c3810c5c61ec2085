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

// The drafts of one step: `history` = every token of the sequence so far
// (prompt, output, and the token about to be fed last); mtp(k) = up to k MTP
// drafts (null: the sequence has none). ngram: prompt lookup; mtp: the MTP
// layer; auto: prompt lookup when the history has a match (free), else MTP.
// k = 0 (or mode off): none.
using MtpDraftFn = std::function<absl::StatusOr<std::vector<int32_t>>(int k)>;
absl::StatusOr<std::vector<int32_t>> ProposeDrafts(SpecMode mode, int k, std::span<const int32_t> history,
                                                   const MtpDraftFn& mtp);

// --speculative auto's depth: per draft position the acceptance rate
// (accepted / drafted, with a prior of 1 accepted in 2), and the measured
// cost of a step by the rows it feeds (seconds, exponential moving average).
// Choose(max_k, base_rows) returns the k in 0..max_k that maximizes expected
// tokens per second: (1 + sum_j prod_{i<=j} a_i) / T(base_rows + k + 1) * T(base_rows + 1);
// 0 unless a draft is expected to pay. Depths never measured are tried once
// (their cost assumed 10% per extra row), so a depth whose verify reads many
// uncached experts is measured and then avoided. `costs`: another chooser
// whose step costs to use (inferd: the worker's, measured over whole steps;
// each sequence keeps its own acceptance); null = this one's.
class DepthChooser {
 public:
  void ObserveAcceptance(int drafted, int accepted);
  void ObserveStep(int64_t rows, double seconds);
  int Choose(int max_k, int64_t base_rows, const DepthChooser* costs = nullptr) const;
  double Acceptance(int position) const;

 private:
  double Cost(int64_t rows) const;
  std::vector<int64_t> drafted_at_, accepted_at_;
  std::vector<double> seconds_by_rows_;  // 0: not measured
};

}  // namespace moe
