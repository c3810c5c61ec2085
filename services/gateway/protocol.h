// OpenAI wire schema: request parsing/validation into typed structs, and the
// response / stream-chunk JSON builders. No HTTP, no generation logic here
// (route = http_server.cc, logic = serving.cc; vLLM entrypoints/openai style).
//
// Validation contract: the body (and every JSON string inside it, such as tool-call
// arguments) nests at most max_json_depth levels, so no later walk recurses unboundedly;
// every field we know is type-checked and range-checked;
// the first problem found is returned as a 400 ApiError whose `param` names
// the field (e.g. "messages[2].content", "stop[1]"). An unknown top-level field
// is a 400 naming it (request_fields.h holds the table); known fields we cannot
// honour (suffix, best_of != n, echo with logprobs) are rejected with a 400 —
// never silently ignored.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/base/json.h"
#include "common/structured/constraint_spec.h"
#include "nlohmann/json.hpp"
#include "services/gateway/api_error.h"
#include "services/gateway/worker.h"

namespace moe::gateway {

struct ProtocolLimits {
  std::vector<std::string> model_names;  // accepted values of "model"
  int max_n = 16;
  int max_stop = 16;
  int max_top_logprobs = 20;
  int max_completion_logprobs = 5;  // legacy completions `logprobs`
  int max_prompts = 32;             // prompts in one /v1/completions batch
  int max_json_depth = kDefaultMaxJsonDepth;  // deeper request JSON is a 400 (--max-json-depth)
};

// What the request asked its output to follow (request_fields.h); kind kNone = free.
struct StructuredOutput {
  std::string param;  // the field that asked ("response_format", "guided_regex", ...): errors name it
  structured::ConstraintSpec::Kind kind = structured::ConstraintSpec::Kind::kNone;
  std::string source;  // schema JSON (client's key order), regex, grammar, or choice JSON
  bool strict = false;
};

// Fields shared by both endpoints.
struct CommonRequest {
  std::string model;
  int32_t max_tokens = -1;  // -1 = not given (fill to the context)
  SamplingParams sampling;
  int n = 1;
  std::vector<std::string> stop;
  int32_t logprobs = -1;  // -1 none, 0 chosen only, k top alternatives
  bool stream = false;
  bool include_usage = false;
  std::string user;
  StructuredOutput structured;
  int32_t min_tokens = 0;
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;  // the client's, beyond the model's own
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  std::vector<std::pair<int32_t, float>> logit_bias;
};

struct ChatMessage {
  std::string role;  // system, developer, user, assistant, tool
  std::string content;
  std::string name;
  std::string reasoning_content;
  nlohmann::json tool_calls;  // assistant: OpenAI tool_calls array (validated) or null
  std::string tool_call_id;   // tool
  // function.arguments of each tool call, parsed (depth-bounded) in the client's key
  // order; null where a call has no arguments.
  std::vector<nlohmann::ordered_json> tool_call_arguments;
};

struct ChatRequest {
  CommonRequest common;
  std::vector<ChatMessage> messages;
  // Validated array of {type:function, function:{name,...}} or null, in the
  // client's key order (the chat template renders it; a model was trained on
  // definitions in the order people write them, not sorted).
  nlohmann::ordered_json tools;
  std::string tool_choice;     // "none", "auto", "required", or a function name
  bool tool_choice_named = false;
  bool parallel_tool_calls = true;  // false: at most one call (enforced by the constraint)
  bool add_generation_prompt = true;  // /tokenize only (chat completions always add it)
  std::string reasoning_effort;     // a template variable (refused when the template does not read it)
  // chat_template_kwargs (vLLM/SGLang convention): variables for the model's chat template
  // (enable_thinking, clear_thinking, reasoning_effort, ...), in the client's key order; the
  // text codec refuses names the template does not read.
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
};

struct CompletionRequest {
  CommonRequest common;
  // One entry per prompt of the batch (a string, token ids, or an array of either); each is
  // text (prompt_texts[i], tokens empty) or token ids.
  struct Prompt {
    bool is_tokens = false;
    std::string text;
    std::vector<int32_t> tokens;
  };
  std::vector<Prompt> prompts;
  bool echo = false;  // the prompt's text leads each choice's text
};

std::optional<ApiError> ParseChatRequest(std::string_view body, const ProtocolLimits& limits,
                                         ChatRequest* out);
std::optional<ApiError> ParseCompletionRequest(std::string_view body, const ProtocolLimits& limits,
                                               CompletionRequest* out);

// ---- responses ---------------------------------------------------------------

struct LogprobEntry {
  std::string token;  // raw token bytes (may be a partial UTF-8 sequence)
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;
  // Speculative decoding's drafts over all choices (completion_tokens_details).
  int32_t accepted_prediction_tokens = 0;
  int32_t rejected_prediction_tokens = 0;
};

struct ChoiceResult {
  int index = 0;
  std::string text;       // content (chat) or text (completions)
  std::string reasoning;  // chat: reasoning_content
  nlohmann::json tool_calls;  // chat: OpenAI tool_calls or null
  std::string finish_reason;  // "stop", "length", "tool_calls"
  bool has_logprobs = false;
  std::vector<LogprobEntry> logprobs;
};

struct ResponseMeta {
  std::string id;
  int64_t created = 0;
  std::string model;
};

nlohmann::json UsageJson(const Usage& u);
// Chat logprobs object {"content": [...]} (with "bytes" arrays).
nlohmann::json ChatLogprobsJson(const std::vector<LogprobEntry>& entries);
// Legacy completions logprobs {"tokens","token_logprobs","top_logprobs","text_offset"}.
nlohmann::json CompletionLogprobsJson(const std::vector<LogprobEntry>& entries, size_t text_offset0);

nlohmann::json ChatCompletionJson(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                                  const Usage& usage);
nlohmann::json CompletionJson(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                              const Usage& usage);
// One streaming chunk for choice `index`. `delta` is the chat delta object
// (ignored for completions, which use `text`); finish_reason empty = null.
nlohmann::json ChatChunkJson(const ResponseMeta& meta, int index, const nlohmann::json& delta,
                             const std::vector<LogprobEntry>* logprobs, const std::string& finish_reason,
                             bool include_usage_null);
nlohmann::json CompletionChunkJson(const ResponseMeta& meta, int index, const std::string& text,
                                   const std::vector<LogprobEntry>* logprobs, size_t text_offset0,
                                   const std::string& finish_reason, bool include_usage_null);
// Final chunk carrying only usage (stream_options.include_usage).
nlohmann::json UsageChunkJson(const ResponseMeta& meta, bool chat, const Usage& usage);

std::string FinishReasonName(FinishReason r);

}  // namespace moe::gateway
