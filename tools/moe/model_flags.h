// Shared pieces of `moe run`, `moe score` and `moe mtp`: the prompt (ids, text
// or chat), id-list parsing, the memory plan check over the engine flags
// (common/model/engine_flags.h), process stats.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/flags.h"
#include "common/model/engine.h"
#include "common/model/engine_flags.h"
#include "common/text/model_text.h"

namespace moe::cli {

// The prompt of `moe run` / `moe score`: exactly one of token ids, plain text
// (encoded with the model's tokenizer.json) or a chat (a messages array, or the chat
// request file format of common/text/model_text.h: {"messages", "tools", ...,
// template kwargs as top-level keys}), rendered with the model's own chat template --
// the same renderer and encoder as the gateway -- then encoded.
struct PromptFlags {
  std::string ids;            // --<ids_flag> 1,2,3
  std::string text;           // --prompt TEXT
  std::string chat;           // --chat JSON
  std::string tokenizer;      // --tokenizer DIR (default: the model directory)
  std::string chat_template;  // --chat-template FILE (default: the model's)
  bool thinking = true;       // --thinking / --no-thinking: template kwarg enable_thinking, when given
  const FlagSet* flags = nullptr;  // to tell a given --thinking from the default
};
void AddPromptFlags(FlagSet& flags, const char* ids_flag, PromptFlags* p);

struct Prompt {
  std::vector<int32_t> ids;
  std::optional<text::ModelText> text;  // set when the prompt was text or chat
};
// `allow_empty`: no prompt at all is fine (moe run --resume-kv).
absl::StatusOr<Prompt> ResolvePrompt(const PromptFlags& p, const char* ids_flag, const std::string& model_dir,
                                     bool allow_empty);

// `moe run`'s sampling flags: the API's sampling parameters (same names, with
// dashes) for the one sampler (common/sampling), plus --greedy and --seed.
struct SamplingFlags {
  bool greedy = false;
  double temperature = 0, top_p = 1.0, min_p = 0, presence_penalty = 0, frequency_penalty = 0;
  int64_t top_k = 0, seed = 0;
  void Register(FlagSet& flags);
  // Errors name the parameter out of range (CheckSampleParams).
  absl::StatusOr<SamplingParams> Resolve() const;
};

// "1,2,3" -> {1,2,3}; errors name the flag and the bad item.
absl::StatusOr<std::vector<int32_t>> ParseIdList(const std::string& flag, const std::string& text);

// The engine config the engine flags ask for, with the memory plan for
// `kv_tokens` of KV checked (EngineFlags::Resolve: refuses what cannot fit,
// the same message as inferd's); prints the plan to stderr.
absl::StatusOr<EngineConfig> PlanAndCheck(const EngineFlags& flags, int64_t kv_tokens, EngineConfig base,
                                          const ExpertdConnector& connect);

int64_t PeakRssBytes();

// The embedded demo model (models/glm-tiny-chat of the source tree this binary was built from, or
// of the working directory), used when --model is not given; "" when neither has a config.json.
std::string DefaultModelDir();

}  // namespace moe::cli
