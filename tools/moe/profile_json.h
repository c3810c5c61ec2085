// A StepProfile (where a forward's time went, common/model/model.h) as JSON, one key per part:
// what `moe run --json` reports per phase and `moe bench prefill` per returning-conversation case.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "common/model/model.h"

namespace moe::cli {

// forwards, rows, and every part's seconds times `scale` under "<part>_<unit>" (total, embed,
// attention, indexer, router, shared_expert, dense_mlp, routed_experts, expert_fetch, lm_head, other).
nlohmann::json StepProfileJson(const StepProfile& p, double scale, std::string_view unit);

}  // namespace moe::cli
