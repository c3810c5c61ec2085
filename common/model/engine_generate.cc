// Engine::Generate: prefill, then decode steps; with speculation each step
// feeds [last token + drafts] in one forward (all rows' logits), draws the
// rows in order with the plain decode's sampler and keyed draws
// (AcceptDrafts, common/sampling/spec.h) and truncates the main cache (and
// the MTP drafter's) to the accepted positions.
#include <algorithm>
#include <chrono>
#include <optional>
#include <unordered_map>

#include "common/base/status.h"
#include "common/model/engine.h"
#include "common/model/spec_mtp.h"

namespace moe {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

absl::StatusOr<GenerateResult> Engine::Generate(std::span<const int32_t> prompt, int64_t max_tokens,
                                                const SamplingParams& sp, KvCache& cache,
                                                const SpecOptions& spec) const {
  GenerateResult r;
  if (prompt.empty()) return absl::InvalidArgumentError("empty prompt");
  MOE_RETURN_IF_ERROR(CheckSampleParams(sp.sample));
  if (spec.mode != SpecMode::kOff) MOE_RETURN_IF_ERROR(CheckSpecOptions(spec));
  if (spec.mode == SpecMode::kMtp && !model_->has_mtp()) {
    return absl::InvalidArgumentError("--speculative mtp: the model has no MTP layer (loaded)");
  }
  const ModelConfig& c = config();
  const int64_t V = c.vocab_size;
  if (cache.length() + static_cast<int64_t>(prompt.size()) + std::max<int64_t>(max_tokens - 1, 0) >
      c.max_position_embeddings) {
    return absl::OutOfRangeError(absl::StrCat("prompt (", prompt.size(), " tokens) + ", max_tokens,
                                              " new tokens exceed the context length ", c.max_position_embeddings));
  }
  const bool use_mtp = model_->has_mtp() && (spec.mode == SpecMode::kMtp || spec.mode == SpecMode::kAuto);
  std::optional<MtpDrafter> mtp;
  if (use_mtp) mtp.emplace(*model_, cfg_.kv_dtype, index_q8_);
  AutoChoosers choosers;  // --speculative auto: per source acceptance and draft time
  DepthChooser step_cost;  // forward seconds by rows fed
  DraftGuard guard;        // auto: realized seconds per token, drafted vs plain steps
  double step_seconds = -1;  // the last decode step's (drafting + forward); < 0: none yet
  DraftSource used = DraftSource::kNone;
  std::unordered_map<int32_t, int32_t> counts;  // generated tokens (penalties)
  const int64_t bytes0 = source_->Stats().bytes_read;
  double t0 = Now();
  // Feeds `ids` at the cache's end; logits of every row when `rows_all`.
  // `prefill`: prompt rows (experts only they use are fetched as FetchUse::kPrefill).
  auto forward = [&](std::span<const int32_t> ids, bool rows_all, bool prefill = false) -> absl::StatusOr<ForwardResult> {
    const int64_t p0 = cache.length();
    BatchSeq one{ids, &cache, rows_all, true, /*all_hidden=*/use_mtp};
    one.prefill = prefill;
    MOE_ASSIGN_OR_RETURN(std::vector<ForwardResult> out, model_->ForwardBatch(std::span<const BatchSeq>(&one, 1)));
    if (mtp) mtp->AddHidden(p0, out[0].hidden);
    return std::move(out[0]);
  };
  MOE_ASSIGN_OR_RETURN(ForwardResult f, forward(prompt, false, /*prefill=*/true));
  r.prefill_seconds = Now() - t0;
  const int64_t bytes1 = source_->Stats().bytes_read;
  r.prefill_expert_bytes = bytes1 - bytes0;
  StepProfile* prof = model_->profile();
  if (prof) {
    r.prefill_profile = *prof;
    *prof = StepProfile{};
    r.source_after_prefill = source_->Stats();
  }
  t0 = Now();
  std::vector<int32_t> history(cache.tokens().begin(), cache.tokens().end());  // + generated
  std::vector<int32_t> drafts;  // the drafts fed after the last token in f
  bool done = false, prefill_token = true;
  while (true) {
    const int64_t fed_from = cache.length() - 1 - static_cast<int64_t>(drafts.size());
    const Acceptance a = AcceptDrafts(drafts, [&](int row) -> int32_t {
      Rng rng = KeyedRng(sp.seed, static_cast<int64_t>(r.tokens.size()));
      const int32_t t =
          Sample(std::span<const float>(f.logits.data() + row * V, V), sp.sample, counts, /*top_logprobs=*/-1, rng)
              .token;
      ++counts[t];
      r.tokens.push_back(t);
      history.push_back(t);
      if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), t) != c.eos_token_ids.end()) {
        r.stopped_at_eos = true;
        done = true;
      }
      if (static_cast<int64_t>(r.tokens.size()) >= max_tokens) done = true;
      return done ? -1 : t;
    });
    if (!drafts.empty()) {
      // Keep the fed last token and the accepted drafts; the token drawn last is pending.
      const int64_t keep = fed_from + a.drawn;
      cache.Truncate(keep);
      if (mtp) mtp->Truncate(keep);
      choosers.Credit(used, static_cast<int>(drafts.size()), a.accepted);
    }
    if (!prefill_token) r.spec.Record(static_cast<int>(drafts.size()), a.accepted, a.drawn);
    if (step_seconds > 0 && spec.mode == SpecMode::kAuto) {
      guard.Observe(1, drafts.empty() ? DraftSource::kNone : used, a.drawn, step_seconds);
    }
    prefill_token = false;
    if (done) break;
    // Drafts: at most what the remaining tokens can use (a verify of k drafts yields up to k + 1).
    const int room = static_cast<int>(std::min<int64_t>(spec.draft_tokens, max_tokens - r.tokens.size() - 1));
    const int32_t next = r.tokens.back();
    MtpDraftFn mtp_fn;
    if (mtp) {
      mtp_fn = [&](int kk) { return mtp->Draft(std::span<const int32_t>(history).first(history.size() - 1), next, kk); };
    }
    const double draft0 = Now();
    const bool mtp_current = mtp && (r.tokens.size() <= 1 || cache.length() - mtp->cache().length() <= kMaxMtpCatchUp);
    MOE_ASSIGN_OR_RETURN(drafts, ProposeDrafts(spec.mode, room, history, mtp_fn, choosers, step_cost, 1, 0, &used,
                                               {guard.Allow(1, DraftSource::kNgram),
                                                mtp_current && guard.Allow(1, DraftSource::kMtp)}));
    std::vector<int32_t> feed{next};
    feed.insert(feed.end(), drafts.begin(), drafts.end());
    const double step0 = Now();
    MOE_ASSIGN_OR_RETURN(f, forward(feed, !drafts.empty()));
    step_cost.ObserveStep(1, static_cast<int64_t>(feed.size()), Now() - step0);
    step_seconds = Now() - draft0;
  }
  cache.set_pending_token(r.tokens.empty() || r.stopped_at_eos ? -1 : r.tokens.back());
  r.decode_seconds = Now() - t0;
  r.decode_expert_bytes = source_->Stats().bytes_read - bytes1;
  if (prof) {
    r.decode_profile = *prof;
    r.profiled = true;
  }
  return r;
}

}  // namespace moe
