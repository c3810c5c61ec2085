// `moe inspect`: what a checkpoint or container holds, in bytes.
//
// Works on a moestream container (format tags from the shard metadata) and
// on a Hugging Face safetensors checkpoint (dtypes; FP8 block scales counted
// with their weight). Groups: experts, attention, indexer, dense_mlp,
// shared_experts, embeddings, lm_head, norms, router, mtp (every tensor of a
// layer >= num_hidden_layers), unknown (HF names we do not classify).
// Thread safety: pure function of the directory contents.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace moe {

struct Census {
  std::string kind;  // "container" or "checkpoint"
  std::string model_type;
  int num_hidden_layers = 0;
  int files = 0;
  uint64_t file_bytes = 0;    // sum of shard file sizes
  uint64_t tensor_bytes = 0;  // sum over logical tensors (data + scales)
  int64_t tensors = 0;
  int64_t expert_records = 0;  // container only
  struct Count {
    int64_t tensors = 0;
    uint64_t bytes = 0;
  };
  std::map<std::string, Count> by_format;
  std::map<std::string, Count> by_group;
  std::map<int, Count> by_layer;  // -1 = global tensors
};

absl::StatusOr<Census> TakeCensus(const std::string& dir);
std::string CensusText(const Census& c);
std::string CensusJson(const Census& c);

}  // namespace moe
