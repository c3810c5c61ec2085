// Shared helpers for the oracle comparisons: golden loading and engine setup.
#pragma once

#include <fstream>
#include <span>
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

// Teacher-forced MTP drafts over `ids` (vLLM convention: slot j takes the
// final-normed hidden state h_j and ids[j+1], predicts ids[j+2]) and the main
// model's own greedy choice at every position (what a draft is accepted by).
struct MtpDrafts {
  std::vector<int32_t> draft;        // ids.size() - 1 slots
  std::vector<int32_t> main_argmax;  // ids.size() positions
};
inline absl::StatusOr<MtpDrafts> TeacherForcedMtpDrafts(const Engine& e, const std::vector<int32_t>& ids) {
  const ModelConfig& c = e.config();
  KvCache cache = e.NewCache();
  KvCache mtp = KvCache::ForModel(c, KvDtype::kF32, /*mtp=*/true);
  auto f = e.model().Forward(ids, cache, true);
  if (!f.ok()) return f.status();
  const size_t n = ids.size() - 1;
  auto m = e.model().MtpForward(std::span(f->hidden).first(n * c.hidden_size), std::span(ids).subspan(1), mtp);
  if (!m.ok()) return m.status();
  MtpDrafts out;
  for (size_t j = 0; j < n; ++j) out.draft.push_back(Argmax(m->logits.data() + j * c.vocab_size, c.vocab_size));
  for (size_t j = 0; j < ids.size(); ++j)
    out.main_argmax.push_back(Argmax(f->logits.data() + j * c.vocab_size, c.vocab_size));
  return out;
}

}  // namespace moe::testing
