#include "common/text/model_text.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/base/status.h"
#include "nlohmann/json.hpp"

namespace moe::text {

absl::StatusOr<ModelText> LoadModelText(const std::string& dir, const std::string& chat_format) {
  namespace fs = std::filesystem;
  ModelText mt;
  std::string tok_path = dir + "/tokenizer.json";
  if (!fs::exists(tok_path) && fs::exists(tok_path + ".gz")) tok_path += ".gz";
  MOE_ASSIGN_OR_RETURN(mt.tokenizer, Tokenizer::FromFile(tok_path));
  if (!chat_format.empty()) {
    MOE_ASSIGN_OR_RETURN(mt.format, ParseChatFormat(chat_format));
  } else {
    MOE_ASSIGN_OR_RETURN(mt.format, DetectChatFormat(dir));
  }
  std::vector<std::string> stops;
  if (mt.format == ChatFormat::kGlm) {
    stops = {"<|endoftext|>", "<|user|>", "<|observation|>"};
  } else {
    stops = {"<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"};
  }
  std::ifstream cfg_file(dir + "/tokenizer_config.json");
  if (cfg_file) {
    std::stringstream ss;
    ss << cfg_file.rdbuf();
    const auto cfg = nlohmann::json::parse(ss.str(), nullptr, false);
    if (cfg.is_object() && cfg.contains("eos_token")) {
      const auto& e = cfg["eos_token"];
      if (e.is_string()) stops.push_back(e.get<std::string>());
      if (e.is_object() && e.contains("content") && e["content"].is_string()) stops.push_back(e["content"].get<std::string>());
    }
  }
  for (const auto& s : stops) {
    const int32_t id = mt.tokenizer->TokenToId(s);
    if (id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(tok_path, ": stop token '", s, "' of the ", ChatFormatName(mt.format), " format is not in the vocab"));
    }
    mt.stop_ids.push_back(id);
  }
  std::sort(mt.stop_ids.begin(), mt.stop_ids.end());
  mt.stop_ids.erase(std::unique(mt.stop_ids.begin(), mt.stop_ids.end()), mt.stop_ids.end());
  return mt;
}

}  // namespace moe::text
