#include "common/format/synth_tokenizer.h"

#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

using nlohmann::ordered_json;

absl::StatusOr<ordered_json> Parse(const std::string& text, const char* what) {
  ordered_json j = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError(absl::StrCat(what, ": not a JSON object"));
  return j;
}

// eos_token of tokenizer_config.json: a string or {"content": ...}.
std::string EosContent(const ordered_json& cfg) {
  const auto it = cfg.find("eos_token");
  if (it == cfg.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"];
  return "";
}

}  // namespace

absl::StatusOr<int64_t> FitTokenizerIds(std::string* tokenizer_json, std::string* tokenizer_config_json,
                                        int64_t vocab_size, std::span<const int64_t> stop_ids) {
  auto tok = Parse(*tokenizer_json, "tokenizer.json");
  if (!tok.ok()) return tok.status();
  ordered_json& t = *tok;
  if (!t.contains("added_tokens") || !t["added_tokens"].is_array()) {
    return absl::InvalidArgumentError("tokenizer.json: no added_tokens list");
  }
  if (!t.contains("model") || !t["model"].contains("vocab") || !t["model"]["vocab"].is_object()) {
    return absl::InvalidArgumentError("tokenizer.json: no model.vocab");
  }
  const int64_t base = static_cast<int64_t>(t["model"]["vocab"].size());
  std::map<int64_t, std::string> added;  // id -> content
  for (const auto& a : t["added_tokens"]) {
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
        !a["content"].is_string()) {
      return absl::InvalidArgumentError("tokenizer.json: an added token without an integer id and a content");
    }
    added[a["id"].get<int64_t>()] = a["content"].get<std::string>();
  }
  auto all_stops_named = [&](int64_t offset) {
    for (int64_t s : stop_ids) {
      const int64_t donor = s - offset;
      if (donor < base || !added.count(donor)) return false;
    }
    return true;
  };
  if (stop_ids.empty() || all_stops_named(0)) return 0;

  std::optional<ordered_json> cfg;
  if (tokenizer_config_json != nullptr) {
    auto c = Parse(*tokenizer_config_json, "tokenizer_config.json");
    if (!c.ok()) return c.status();
    cfg = std::move(*c);
  }
  const std::string eos = cfg ? EosContent(*cfg) : "";
  if (eos.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the tokenizer does not name the config's stop id ", stop_ids[0],
        " and has no tokenizer_config.json eos_token to align with it"));
  }
  int64_t eos_id = -1;
  for (const auto& [id, content] : added) {
    if (content == eos) eos_id = id;
  }
  if (eos_id < base) {
    return absl::InvalidArgumentError(
        absl::StrCat("eos_token '", eos, "' is not an added token above the tokenizer's BPE vocabulary"));
  }
  const int64_t offset = stop_ids[0] - eos_id;
  if (offset <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("the tokenizer's eos '", eos, "' has id ", eos_id,
                                                   ", not below the config's stop id ", stop_ids[0]));
  }
  if (added.rbegin()->first + offset >= vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("moving the added tokens by ", offset, " puts id ",
                                                   added.rbegin()->first + offset, " past the vocabulary (",
                                                   vocab_size, ")"));
  }
  if (!all_stops_named(offset)) {
    return absl::InvalidArgumentError(absl::StrCat("aligned on eos '", eos, "', the config's stop ids do not all "
                                                   "fall on the tokenizer's added tokens"));
  }
  auto moved = [&](int64_t id) { return id >= base ? id + offset : id; };
  for (auto& a : t["added_tokens"]) a["id"] = moved(a["id"].get<int64_t>());
  // TemplateProcessing names special tokens by id too.
  if (t.contains("post_processor") && t["post_processor"].is_object() &&
      t["post_processor"].contains("special_tokens") && t["post_processor"]["special_tokens"].is_object()) {
    for (auto& [name, st] : t["post_processor"]["special_tokens"].items()) {
      if (st.is_object() && st.contains("ids") && st["ids"].is_array()) {
        for (auto& id : st["ids"])
          if (id.is_number_integer()) id = moved(id.get<int64_t>());
      }
    }
  }
  *tokenizer_json = t.dump();
  if (cfg && cfg->contains("added_tokens_decoder") && (*cfg)["added_tokens_decoder"].is_object()) {
    ordered_json dec = ordered_json::object();
    for (auto& [key, v] : (*cfg)["added_tokens_decoder"].items()) {
      int64_t id = 0;
      try {
        id = std::stoll(key);
      } catch (const std::exception&) {
        return absl::InvalidArgumentError(absl::StrCat("tokenizer_config.json: added_tokens_decoder key '", key,
                                                       "' is not an id"));
      }
      dec[std::to_string(moved(id))] = v;
    }
    (*cfg)["added_tokens_decoder"] = std::move(dec);
    *tokenizer_config_json = cfg->dump(2) + "\n";
  }
  return offset;
}

}  // namespace moe
