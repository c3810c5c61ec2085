#include "common/model/pass_memory.h"

#include <algorithm>

namespace moe {

int64_t PassActivationBytesPerRow(const ModelConfig& c) {
  const int64_t H = c.hidden_size;
  const int64_t held = H + c.index_topk;  // hidden state + top-k keys (int32: 4 B, counted as one float)
  const int64_t attention = 2 * c.q_lora_rank + c.num_attention_heads * c.qk_head_dim() + c.kv_lora_rank +
                            c.qk_rope_head_dim + c.num_attention_heads * c.v_head_dim +
                            static_cast<int64_t>(c.index_n_heads) * (c.index_head_dim + 1) + c.index_head_dim;
  const int64_t moe = c.n_routed_experts + static_cast<int64_t>(c.num_experts_per_tok) * H + 2 * H +
                      2 * H + 2 * c.moe_intermediate_size;
  const int64_t dense = 2 * c.intermediate_size;
  const int64_t layer = 2 * H + std::max({attention, moe, dense});
  return 4 * (held + layer);
}

int64_t PassRowsForBudget(const ModelConfig& c, int64_t budget_bytes) {
  const int64_t per = std::max<int64_t>(1, PassActivationBytesPerRow(c));
  return std::max<int64_t>(1, budget_bytes / per);
}

}  // namespace moe
