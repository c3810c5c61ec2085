// The batcher's speculative-decoding part (batcher.h): which drafts a
// decoding sequence feeds, and how each verify row is drawn.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "services/inferd/batcher.h"

namespace moe::inferd {

std::vector<int32_t> Batcher::Drafts(Seq& s, int64_t plain_rows, int64_t base_rows, AllowedDrafters allowed) {
  const SpecOptions& o = config_.spec;
  s.used = DraftSource::kNone;
  if (o.mode == SpecMode::kOff || !model_->can_rollback()) return {};
  // A verify of k drafts yields up to k + 1 tokens and feeds positions up to length + k.
  const int64_t left = static_cast<int64_t>(s.req.max_tokens) - static_cast<int64_t>(s.generated.size()) - 1;
  const int64_t ctx = model_->max_context() - s.state->length() - 2;
  const int room = static_cast<int>(std::min<int64_t>({o.draft_tokens, left, ctx}));
  if (room < 1) return {};
  std::vector<int32_t> d;
  if (s.req.constraint) {
    // Forced tokens (exactly one legal next token) are drafts that are always accepted.
    TokenConstraint& tc = *s.req.constraint;
    while (static_cast<int>(d.size()) < room && !tc.Terminated()) {
      const int32_t t = tc.ForcedToken();
      if (t < 0 || !tc.Accept(t).ok()) break;
      d.push_back(t);
    }
    tc.Rollback(static_cast<int>(d.size()));
    if (!d.empty()) return d;
  }
  std::vector<int32_t> history = s.fed;
  history.push_back(s.pending);
  MtpDraftFn mtp;
  if (model_->has_mtp_drafts()) {
    mtp = [&](int kk) { return model_->DraftMtp(*s.state, s.fed, s.pending, kk); };
  }
  if (allowed.mtp && s.generated.size() > 1 && model_->MtpBehind(*s.state) > kMaxMtpCatchUp) allowed.mtp = false;
  auto got = ProposeDrafts(o.mode, room, history, mtp, s.choosers, step_cost_, plain_rows, base_rows - 1, &s.used,
                          allowed);
  if (!got.ok()) {
    // A failed draft costs the sequence its drafts for this step, never its output.
    MOE_LOG(WARNING) << "drafts for " << s.req.id << ": " << got.status();
    return {};
  }
  return std::move(*got);
}

int32_t Batcher::DrawRow(Seq& s, const float* logits, DrawCtx& c) {
  const int32_t V = model_->vocab_size();
  SampleOptions opt;
  if (s.req.constraint && s.req.constraint->FillMask(s.mask)) opt.allowed = s.mask;
  if (static_cast<int32_t>(s.generated.size()) < s.req.min_tokens) opt.banned = s.req.stop_token_ids;
  opt.logit_bias = s.req.logit_bias;
  opt.seen = s.seen;
  Rng rng = KeyedRng(s.seed, static_cast<int64_t>(s.generated.size()));
  SampleResult r = Sample(std::span<const float>(logits, V), s.req.sampling, s.counts, s.req.logprobs, rng, opt);
  if (s.req.constraint) {
    if (absl::Status bad = s.req.constraint->Accept(r.token); !bad.ok()) {
      c.error = absl::InternalError(absl::StrCat("constrained sampling: ", bad.message()));
      return -1;
    }
  }
  if (!s.seen.empty()) s.seen.push_back(r.token);
  s.generated.push_back(r.token);
  ++s.counts[r.token];
  s.pending = r.token;
  ++c.rows;
  c.stop = std::find(s.req.stop_token_ids.begin(), s.req.stop_token_ids.end(), r.token) != s.req.stop_token_ids.end();
  // The state keeps fed_from + rows positions once this row is accepted.
  c.length = static_cast<int32_t>(s.generated.size()) >= s.req.max_tokens ||
             c.fed_from + c.rows + 1 >= model_->max_context();
  const int32_t t = r.token;
  c.out.tokens.push_back(std::move(r));
  return c.stop || c.length ? -1 : t;
}

}  // namespace moe::inferd
