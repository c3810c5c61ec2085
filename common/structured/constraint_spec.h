// What a structured-output request asks of one sequence's output, in one value the gateway
// builds from the request (response_format, structured_outputs / guided_*, json_schema /
// grammar, tool_choice, parallel_tool_calls) and the worker compiles against its vocabulary
// (grammar_constraint.h). It travels between them as JSON (ToJson / FromJson).
//
// The grammar (xgrammar 0.2.8 structural tag, see BuildStructuralTag) of the whole output:
//   [ reasoning: any text without the chat markers, up to reasoning_end ]   -- thinking on
//   body:
//     kJsonSchema   a JSON value of the schema (PrepareJsonSchema: refused keywords, strict)
//     kJsonObject   any JSON object
//     kRegex        text matching the regex (xgrammar's regex dialect, ECMAScript-like)
//     kGrammar      xgrammar EBNF (GBNF-like, `root ::= ...`)
//     kLark         a Lark grammar (`start: ...`), converted by xgrammar
//     kChoice       exactly one of the strings
//     kToolCalls    tool calls in the chat format's syntax (ToolSyntax), each call's
//                   arguments a JSON value of that function's parameters schema:
//                   named function: exactly one call of it, nothing else;
//                   required: text, then at least one call (single_call: exactly one);
//                   auto with single_call: text, optionally one call, nothing after it.
// JSON anywhere: whitespace between tokens at most max_whitespace characters in a row (a
// model cannot loop on spaces); strings never contain a text_excludes marker (the chat
// format's control tags, so the output parser cannot mistake a string for a tag).
// After the body only a stop token is legal, so the output ends valid or is cut by the
// length limit.
// Thread safety: plain values and pure functions.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/structured/schema_check.h"
#include "nlohmann/json.hpp"

namespace moe::structured {

// How a chat format writes one tool call: begin + NAME + after_name + ARGUMENTS + end, the
// arguments in `style` ("json": a JSON object; "glm_xml": <arg_key>K</arg_key><arg_value>V
// </arg_value> pairs, string values raw).
struct ToolSyntax {
  std::string begin = "<tool_call>";
  std::string after_name;
  std::string style = "glm_xml";
  std::string end = "</tool_call>";
  std::string trigger;  // the text that starts a call in free text ("" = begin)
  const std::string& start() const { return trigger.empty() ? begin : trigger; }
};

struct ToolFunction {
  std::string name;
  nlohmann::ordered_json parameters = nlohmann::ordered_json::object();  // JSON Schema
  bool strict = true;
};

struct ConstraintSpec {
  enum class Kind { kNone, kJsonSchema, kJsonObject, kRegex, kGrammar, kLark, kChoice, kToolCalls };
  Kind kind = Kind::kNone;
  std::string source;                   // schema JSON / regex / grammar; choice: JSON array of strings
  bool strict = true;                   // kJsonSchema: no properties or items the schema does not name
  int max_whitespace = 20;              // longest run of JSON whitespace
  std::vector<ToolFunction> tools;      // kToolCalls: the functions that may be called
  ToolSyntax tool_syntax;
  bool tools_required = false;          // kToolCalls: at least one call
  bool named_tool = false;              // kToolCalls: exactly one call of tools[0], no text
  bool single_call = false;             // kToolCalls: at most one call
  std::string reasoning_end;            // non-empty: output starts in a reasoning block it closes
  std::vector<std::string> text_excludes;  // markers that never appear in free text or JSON strings
  SchemaLimits limits;

  bool active() const { return kind != Kind::kNone; }
};

const char* ConstraintKindName(ConstraintSpec::Kind k);

std::string ToJson(const ConstraintSpec& spec);
absl::StatusOr<ConstraintSpec> ConstraintSpecFromJson(const std::string& json);

// The xgrammar structural tag (JSON text) of the whole output, every JSON schema in it
// pre-checked; InvalidArgument naming the refused keyword or the malformed input. kLark is
// not a structural-tag body: its reasoning prefix only (or "" without one) -- the compiler
// concatenates the converted Lark grammar.
absl::StatusOr<std::string> BuildStructuralTag(const ConstraintSpec& spec);

// Builds the grammar without a vocabulary (cheap: no token masks), so the gateway can refuse
// a bad regex, grammar or schema with a 400 before anything is queued.
absl::Status ValidateConstraint(const ConstraintSpec& spec);

}  // namespace moe::structured
