// Shared pieces of `moe run` and `moe score`: the prompt (ids, text or chat),
// id-list parsing, the memory plan check, process stats.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/flags.h"
#include "common/model/engine.h"
#include "common/text/model_text.h"

namespace moe::cli {

// The prompt of `moe run` / `moe score`: exactly one of token ids, plain text
// (encoded with the model's tokenizer.json) or a chat (OpenAI-style messages
// JSON, or {"messages": [...], "tools": [...]}, rendered with the model's chat
// template, then encoded).
struct PromptFlags {
  std::string ids;          // --<ids_flag> 1,2,3
  std::string text;         // --prompt TEXT
  std::string chat;         // --chat JSON
  std::string tokenizer;    // --tokenizer DIR (default: the model directory)
  std::string chat_format;  // --chat-format glm|deepseek_v3 (default: detected)
  bool thinking = true;     // --no-thinking: GLM prompt ends in </think>
};
void AddPromptFlags(FlagSet& flags, const char* ids_flag, PromptFlags* p);

struct Prompt {
  std::vector<int32_t> ids;
  std::optional<text::ModelText> text;  // set when the prompt was text or chat
};
// `allow_empty`: no prompt at all is fine (moe run --resume-kv).
absl::StatusOr<Prompt> ResolvePrompt(const PromptFlags& p, const char* ids_flag, const std::string& model_dir,
                                     bool allow_empty);

// --attention: "auto", "explicit" (HF-exact) or "absorbed" (AttentionPath, model.h).
inline constexpr char kAttentionFlagHelp[] =
    "auto (absorbed if kv_b is integer-quantized, else explicit), explicit (HF-exact) or absorbed "
    "(faster at GLM-5's shapes)";
absl::StatusOr<AttentionPath> ParseAttentionFlag(const std::string& value);

// "1,2,3" -> {1,2,3}; errors name the flag and the bad item.
absl::StatusOr<std::vector<int32_t>> ParseIdList(const std::string& flag, const std::string& text);

// Builds the engine config from a RAM budget (0 = unlimited): the expert
// cache gets what is left after resident weights and `kv_tokens` of KV.
// Prints the plan to stderr; refuses (ResourceExhausted) a plan that does
// not fit the budget or the machine's available memory.
absl::StatusOr<EngineConfig> PlanAndCheck(const std::string& model_dir, uint64_t ram_budget, int64_t kv_tokens,
                                          EngineConfig base);

int64_t PeakRssBytes();

// The embedded demo model (models/glm-tiny-chat of the source tree this binary was built from, or
// of the working directory), used when --model is not given; "" when neither has a config.json.
std::string DefaultModelDir();

}  // namespace moe::cli
