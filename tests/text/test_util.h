// Shared helpers for the common/text tests.
#pragma once

#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>

#include "common/text/tokenizer.h"
#include "gtest/gtest.h"
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

// Loads a tokenizer under tests/data/text/ once per test binary (the real ones take a
// while under sanitizers). Fails the current test and returns nullptr on error.
inline const Tokenizer* CachedTokenizer(const std::string& rel) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(rel);
  if (it != cache.end()) return it->second.get();
  auto t = Tokenizer::FromFile(DataDir() + rel);
  if (!t.ok()) {
    ADD_FAILURE() << rel << ": " << t.status();
    return nullptr;
  }
  return (cache[rel] = std::move(t).value()).get();
}

}  // namespace moe::text::testing
