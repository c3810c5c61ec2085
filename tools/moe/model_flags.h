// Shared pieces of `moe run` and `moe score`: id-list parsing, the memory
// plan check, process stats.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/engine.h"

namespace moe::cli {

// "1,2,3" -> {1,2,3}; errors name the flag and the bad item.
absl::StatusOr<std::vector<int32_t>> ParseIdList(const std::string& flag, const std::string& text);

// Builds the engine config from a RAM budget (0 = unlimited): the expert
// cache gets what is left after resident weights and `kv_tokens` of KV.
// Prints the plan to stderr; refuses (ResourceExhausted) a plan that does
// not fit the budget or the machine's available memory.
absl::StatusOr<EngineConfig> PlanAndCheck(const std::string& model_dir, uint64_t ram_budget, int64_t kv_tokens,
                                          EngineConfig base);

int64_t PeakRssBytes();

}  // namespace moe::cli
