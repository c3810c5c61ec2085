// The request fields beyond the OpenAI core that both peers (vLLM, llama-server) accept:
// structured outputs, the vLLM sampling extras, and the table of every top-level field each
// endpoint knows -- any other field is a 400 naming it (docs/SERVING.md "Request fields" lists
// each one and what it does; the few accepted without effect are listed there with why).
//
// Structured outputs, one source per request (two are a 400 naming both):
//   response_format {type: text | json_object [schema (llama.cpp)] | json_schema
//                    {json_schema: {name, schema, strict, description}}}
//   structured_outputs {json | regex | choice | grammar | json_object} (vLLM >= 0.10)
//   guided_json | guided_regex | guided_choice | guided_grammar (vLLM, older)
//   json_schema | grammar (llama-server; grammar is GBNF = xgrammar EBNF)
// A grammar containing "::=" is EBNF/GBNF (root rule `root`), otherwise Lark (`start`), as
// vLLM guesses. Schemas keep the client's key order (the order properties are generated in).
// Thread safety: pure functions.
#pragma once

#include <optional>

#include "nlohmann/json.hpp"
#include "services/gateway/api_error.h"
#include "services/gateway/protocol.h"

namespace moe::gateway {

// Every top-level key of `o` must be one of the endpoint's fields.
std::optional<ApiError> CheckKnownFields(const nlohmann::json& o, bool chat);

// Structured-output fields into c->structured (from the key-ordered body).
std::optional<ApiError> ParseStructuredOutput(const nlohmann::ordered_json& o, StructuredOutput* out);
// Whether `o` has any structured-output field (then the ordered body is needed).
bool HasStructuredOutput(const nlohmann::json& o);

// repetition_penalty, min_tokens, ignore_eos, stop_token_ids, include_stop_str_in_output,
// skip_special_tokens, logit_bias.
std::optional<ApiError> ParseSamplingExtras(const nlohmann::json& o, CommonRequest* c);

}  // namespace moe::gateway
