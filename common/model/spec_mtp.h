// MTP drafts (docs/MODEL.md, "MTP drafting"): the MTP layer run recursively
// on its own KV / indexer cache, kept extended over every prompt and accepted
// position (MODEL_SPEC-style slot j = (h_j, t_{j+1}) at MTP position j).
//
// Use per sequence: after every main-model forward, AddHidden(p0, rows) with
// the final-normed hidden states of the positions it fed (BatchSeq::
// all_hidden); after a verify, Truncate(n) to the kept length (rejected rows'
// hidden states go with them); Draft(tokens, next, k) extends the MTP cache
// over the slots not yet in it (the last one takes `next`, the token about to
// be fed at position tokens.size()) and drafts k tokens: the first from the
// last slot, each further one from the previous step's decoder output
// (before shared_head.norm, vLLM's choice) and draft at the next position;
// those recursive rows are dropped from the MTP cache again, so it only ever
// holds committed slots. Drafts are greedy (argmax): deterministic, so the
// acceptance rule of common/sampling/spec.h is lossless for sampling too.
// The MTP layer's own indexer scores every extended slot; with the config's
// index_share_for_mtp_iteration (GLM-5.2) the recursive draft steps of a round
// reuse the round's step-0 selection (plus the positions drafted since)
// instead of scoring: the MTP layer's own top-k, never the target's (MODEL_SPEC
// section 5).
// The main model's hidden state of every fed position is kept (hidden_size
// floats per token, counted in Bytes()): a prefix copy (inferd's prefix
// cache) cut inside the MTP cache re-extends it from them at the next draft.
// Stale: when hidden states are missing (a cache resumed from a KV file
// without them: its earlier positions were never seen) Draft returns no
// drafts; inferd's disk tier saves them with the state (Restore).
// Thread safety: one sequence, one thread; the Model is shared read-only.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/kv_cache.h"
#include "common/model/model.h"

namespace moe {

class MtpDrafter {
 public:
  MtpDrafter(const Model& model, KvDtype dtype, bool index_q8);

  // Hidden rows (n x hidden_size) of main positions [p0, p0 + n).
  void AddHidden(int64_t p0, std::span<const float> hidden);
  // The main cache now holds n tokens.
  void Truncate(int64_t n);
  // Up to k drafts after tokens (main positions 0..P-1) + next (position P).
  absl::StatusOr<std::vector<int32_t>> Draft(std::span<const int32_t> tokens, int32_t next, int k);
  bool stale() const { return stale_; }
  // No hidden states for what the main cache holds (e.g. a prefix copy made without a drafter).
  void MarkStale() {
    stale_ = true;
    hidden_.clear();
  }
  const KvCache& cache() const { return mtp_; }
  // The main model's hidden states it keeps (rows of positions [0, fed)).
  const std::vector<float>& hidden() const { return hidden_; }
  // A drafter resumed from saved parts (inferd's prefix disk tier): the MTP
  // cache and the hidden rows another drafter of this model had. Not stale.
  void Restore(KvCache mtp, std::vector<float> hidden) {
    mtp_ = std::move(mtp);
    hidden_ = std::move(hidden);
    stale_ = false;
  }
  int64_t Bytes() const { return mtp_.Bytes() + static_cast<int64_t>(hidden_.size() * sizeof(float)); }

 private:
  const Model* model_;
  KvCache mtp_;
  std::vector<float> hidden_;  // rows of main positions [0, fed)
  bool stale_ = false;
};

}  // namespace moe
