#include "tools/moe/profile_json.h"

#include <string>

namespace moe::cli {

nlohmann::json StepProfileJson(const StepProfile& p, double scale, std::string_view unit) {
  nlohmann::json j = {{"forwards", p.forwards}, {"rows", p.rows}};
  const auto put = [&](const char* part, double seconds) { j[std::string(part) + "_" + std::string(unit)] = seconds * scale; };
  put("total", p.total);
  put("embed", p.embed);
  put("attention", p.attention);
  put("attention_core", p.attention_core);
  put("indexer", p.indexer);
  put("router", p.router);
  put("shared_expert", p.shared_expert);
  put("dense_mlp", p.dense_mlp);
  put("routed_experts", p.routed_experts);
  put("expert_fetch", p.expert_fetch);
  put("lm_head", p.lm_head);
  put("other", p.Other());
  return j;
}

}  // namespace moe::cli
