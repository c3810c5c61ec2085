// Turns what a request asks of its output (response_format and its peers' spellings,
// tool_choice required / a named function, parallel_tool_calls: false) into the one
// ConstraintSpec the workers enforce token by token (common/structured), validated here so a
// bad schema, regex or grammar is a 400 naming its field before anything is queued.
//
// Rules:
//  - The body: the structured-output field (request_fields.h), or the tool calls --
//    tool_choice named: exactly one call of that function; "required": at least one call
//    (one with parallel_tool_calls false); "auto" with parallel_tool_calls false: at most
//    one call. Each call's arguments follow that function's `parameters` schema (strict
//    when the function says "strict": true, else JSON Schema's reading).
//  - Both a structured-output field and forced tool calls, or a structured-output field
//    with tools the model may call (tool_choice auto): 400 (one grammar for the whole
//    output; send tool_choice "none" to get the format).
//  - Thinking on (the prompt opens a reasoning block): the constraint starts after the
//    block's end marker ("</think>"); the reasoning itself is free text without markers.
//  - ignore_eos with a constraint: 400 (once the output is complete only an end token is
//    legal).
//  - Tool-call constraints need the chat format's tool syntax (TextCodec::ToolCallSyntax);
//    without it the fields that would need one are refused by name.
//  - A constrained non-tool body reaches the client as content, verbatim: the output parser
//    only splits off the reasoning (ConstrainedOutputParser), so JSON that happens to hold a
//    tag's text stays JSON.
// Thread safety: pure functions; parsers are per choice.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "services/gateway/api_error.h"
#include "services/gateway/protocol.h"
#include "services/gateway/text_codec.h"

namespace moe::gateway {

struct StructuredConfig {
  int max_whitespace = 20;        // --structured-max-whitespace
  int64_t max_repeat = 4096;      // --structured-max-repeat
};

struct BuiltConstraint {
  std::string json;              // ConstraintSpec JSON ("" = unconstrained)
  bool verbatim_body = false;    // content is the constrained body as generated
  std::string reasoning_end;     // with verbatim_body: the marker that ends the reasoning ("" = none)
};

// `chat` null for /v1/completions.
std::optional<ApiError> BuildConstraint(const CommonRequest& common, const ChatRequest* chat, bool opens_reasoning,
                                        const TextCodec& codec, const StructuredConfig& config, BuiltConstraint* out);

// Reasoning (when the output starts in it) up to `reasoning_end`, then everything as content.
std::unique_ptr<OutputParser> NewConstrainedOutputParser(bool start_in_reasoning, std::string reasoning_end);

}  // namespace moe::gateway
