#include "common/model/spec_mtp.h"

#include "common/base/status.h"

namespace moe {

MtpDrafter::MtpDrafter(const Model& model, KvDtype dtype, bool index_q8)
    : model_(&model), mtp_(KvCache::ForModel(model.config(), dtype, /*mtp=*/true, index_q8)) {}

void MtpDrafter::AddHidden(int64_t p0, std::span<const float> hidden) {
  const int64_t H = model_->config().hidden_size;
  const int64_t have = mtp_.length() + static_cast<int64_t>(hidden_.size()) / H;
  if (p0 != have) {
    stale_ = true;  // a gap (or overlap): slots without their hidden state
    hidden_.clear();
    return;
  }
  if (stale_) return;
  hidden_.insert(hidden_.end(), hidden.begin(), hidden.end());
}

void MtpDrafter::Truncate(int64_t n) {
  const int64_t H = model_->config().hidden_size;
  // MTP slot M-1 took token M: committed only while M < n (a verify rollback
  // always keeps it; a prefix copy may cut inside the MTP cache).
  if (mtp_.length() >= n) {
    stale_ = true;
    hidden_.clear();
    return;
  }
  const int64_t keep = (n - mtp_.length()) * H;
  if (static_cast<int64_t>(hidden_.size()) > keep) hidden_.resize(keep);
}

absl::StatusOr<std::vector<int32_t>> MtpDrafter::Draft(std::span<const int32_t> tokens, int32_t next, int k) {
  std::vector<int32_t> drafts;
  const ModelConfig& c = model_->config();
  const int64_t H = c.hidden_size, V = c.vocab_size, P = static_cast<int64_t>(tokens.size());
  const int64_t M = mtp_.length(), rows = static_cast<int64_t>(hidden_.size()) / H;
  if (stale_ || !model_->has_mtp() || k < 1 || M + rows != P || rows == 0) return drafts;
  // Extend over slots M..P-1: (h_j, t_{j+1}), the last with `next`.
  std::vector<int32_t> ids(tokens.begin() + M + 1, tokens.end());
  ids.push_back(next);
  MOE_ASSIGN_OR_RETURN(MtpResult m, model_->MtpForward(hidden_, ids, mtp_));
  hidden_.clear();
  drafts.push_back(Argmax(m.logits.data() + (rows - 1) * V, V));
  std::vector<float> u(m.out.end() - H, m.out.end());
  while (static_cast<int>(drafts.size()) < k && mtp_.length() < c.max_position_embeddings) {
    const int32_t one[1] = {drafts.back()};
    MOE_ASSIGN_OR_RETURN(MtpResult r, model_->MtpForward(u, one, mtp_));
    drafts.push_back(Argmax(r.logits.data(), V));
    u.assign(r.out.begin(), r.out.end());
  }
  mtp_.Truncate(P);  // the recursive rows were speculative
  return drafts;
}

}  // namespace moe
