// A narrow GLM-5 for tests that write files: the release config (FP8, its
// exclusion list) with small widths, 2 layers (1 dense, 1 MoE) + the MTP
// layer, 8 experts, top-2, a 512-token vocabulary.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace moe::testing_synth {

inline std::vector<std::pair<std::string, std::string>> NarrowGlm5() {
  return {{"num_hidden_layers", "2"},   {"first_k_dense_replace", "1"}, {"hidden_size", "256"},
          {"intermediate_size", "384"}, {"moe_intermediate_size", "128"}, {"n_routed_experts", "8"},
          {"num_experts_per_tok", "2"}, {"num_attention_heads", "2"},   {"q_lora_rank", "128"},
          {"kv_lora_rank", "128"},      {"vocab_size", "512"},          {"eos_token_id", "[1]"},
          {"pad_token_id", "1"},        {"index_n_heads", "2"}};
}

}  // namespace moe::testing_synth
