#include "common/model/spec_mtp.h"

#include <algorithm>

#include "common/base/status.h"

namespace moe {

MtpDrafter::MtpDrafter(const Model& model, KvDtype dtype, bool index_q8)
    : model_(&model), mtp_(KvCache::ForModel(model.config(), dtype, /*mtp=*/true, index_q8)) {}

void MtpDrafter::AddHidden(int64_t p0, std::span<const float> hidden) {
  const int64_t H = model_->config().hidden_size;
  if (stale_) return;
  if (p0 != static_cast<int64_t>(hidden_.size()) / H) {
    MarkStale();  // a gap (or overlap): slots without their hidden state
    return;
  }
  hidden_.insert(hidden_.end(), hidden.begin(), hidden.end());
}

void MtpDrafter::Truncate(int64_t n) {
  const int64_t H = model_->config().hidden_size;
  if (static_cast<int64_t>(hidden_.size()) > n * H) hidden_.resize(n * H);
  // MTP slot j took token j+1: slots from n-1 on took tokens the truncated
  // sequence has not fixed (a verify rollback never cuts there; a prefix copy
  // may). They are recomputed from the kept hidden states at the next draft.
  if (mtp_.length() > n - 1) mtp_.Truncate(std::max<int64_t>(n - 1, 0));
}

absl::StatusOr<std::vector<int32_t>> MtpDrafter::Draft(std::span<const int32_t> tokens, int32_t next, int k) {
  std::vector<int32_t> drafts;
  const ModelConfig& c = model_->config();
  const int64_t H = c.hidden_size, V = c.vocab_size, P = static_cast<int64_t>(tokens.size());
  const int64_t M = mtp_.length(), rows = P - M;
  if (stale_ || !model_->has_mtp() || k < 1 || rows < 1 || static_cast<int64_t>(hidden_.size()) != P * H) {
    return drafts;
  }
  // Extend over slots M..P-1: (h_j, t_{j+1}), the last with `next`.
  std::vector<int32_t> ids(tokens.begin() + M + 1, tokens.end());
  ids.push_back(next);
  // index_share_for_mtp_iteration: the later steps of this round reuse step 0's top-k.
  const bool share = c.index_share_for_mtp_iteration && c.has_indexer;
  Model::IndexShare step0;
  MOE_ASSIGN_OR_RETURN(MtpResult m, model_->MtpForward(std::span<const float>(hidden_).subspan(M * H, rows * H), ids,
                                                       mtp_, nullptr, share ? &step0 : nullptr,
                                                       /*last_logits_only=*/true));
  drafts.push_back(Argmax(m.logits.data(), V));
  std::vector<float> u(m.out.end() - H, m.out.end());
  while (static_cast<int>(drafts.size()) < k && mtp_.length() < c.max_position_embeddings) {
    const int32_t one[1] = {drafts.back()};
    MOE_ASSIGN_OR_RETURN(MtpResult r, model_->MtpForward(u, one, mtp_, share ? &step0 : nullptr));
    drafts.push_back(Argmax(r.logits.data(), V));
    u.assign(r.out.begin(), r.out.end());
  }
  mtp_.Truncate(P);  // the recursive rows were speculative
  return drafts;
}

}  // namespace moe
