// Shared helpers for the common/text tests.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include "nlohmann/json.hpp"

namespace moe::text::testing {

inline std::string DataDir() { return std::string(MOE_SOURCE_DIR) + "/tests/data/text/"; }

inline std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline nlohmann::ordered_json LoadJson(const std::string& path) { return nlohmann::ordered_json::parse(ReadFile(path)); }

inline std::string Unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return out;
}

}  // namespace moe::text::testing
