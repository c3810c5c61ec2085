// Shared helpers for the oracle comparisons: golden loading and engine setup.
#pragma once

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/model/engine.h"

namespace moe::testing {

inline std::string OracleDir(const std::string& name) { return std::string(MOE_SOURCE_DIR) + "/tests/data/oracle/" + name; }

// The goldens come from the oracle branch; until it is merged, tests skip.
inline bool HaveOracle(const std::string& name) { return std::ifstream(OracleDir(name) + "/goldens.json").good(); }

inline nlohmann::json LoadGoldens(const std::string& name) {
  std::ifstream in(OracleDir(name) + "/goldens.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

inline std::vector<int32_t> Ids(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

}  // namespace moe::testing
