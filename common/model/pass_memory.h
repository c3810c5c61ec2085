// Activation memory of a forward pass, per row: what a layer-major prefill
// pass (ForwardPass, model.h) holds while it runs, so a planner can size
// passes to a byte budget (docs/SERVING.md, "Planned prefill").
//
// Counted (f32 unless noted), per row, from the allocations of model.cc,
// attention.cc, dsa_indexer.cc and moe_routing.cc:
//   held for the whole pass: the hidden state (H) and the DSA top-k key list
//     (index_topk int32);
//   a decoder layer: its norm input and output (2 H), plus the largest of
//     attention: q_a and its norm (2 q_lora_rank), q (heads x qk_head_dim),
//       kv_a (kv_lora_rank + rope), the attention output (heads x v_head_dim),
//       the indexer's q, k and weights (index heads x (dim + 1) + dim);
//     MoE: router logits (E), K slot outputs (K x H), their sum and the
//       shared expert's output (2 H), one expert's rows (2 H + 2 moe_inter);
//     dense MLP: gate and up (2 intermediate);
//   the LM head at the end: final norm (2 H) and one logits row (vocab), only
//     for rows that want logits (one per prompt: not per row).
// At GLM-5's dimensions this is ~0.38 MiB per row (docs/SERVING.md), i.e.
// ~3 GiB for an 8K-token pass: why a pass is budgeted, not the whole prompt.
// Thread safety: pure function.
#pragma once

#include <cstdint>

#include "common/format/model_config.h"

namespace moe {

// The default budget of one pass per worker (moe plan, inferd, moe bench
// prefill): ~1,360 rows at GLM-5's dimensions, so a 1K-token prompt is one pass.
inline constexpr int64_t kDefaultPrefillPassBytes = int64_t{512} << 20;

int64_t PassActivationBytesPerRow(const ModelConfig& c);

// Rows of one pass that fit `budget_bytes` (at least 1).
int64_t PassRowsForBudget(const ModelConfig& c, int64_t budget_bytes);

}  // namespace moe
