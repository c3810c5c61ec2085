#include "services/gateway/request_fields.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/json.h"

namespace moe::gateway {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
using Kind = structured::ConstraintSpec::Kind;
using Err = std::optional<ApiError>;

const std::set<std::string>& SharedFields() {
  static const std::set<std::string> k = {
      "model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
      "repetition_penalty", "seed", "n", "stop", "stream", "stream_options", "user", "logprobs", "logit_bias",
      "min_tokens", "ignore_eos", "stop_token_ids", "include_stop_str_in_output", "skip_special_tokens",
      "response_format", "structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
      "guided_decoding_backend", "json_schema", "grammar"};
  return k;
}
const std::set<std::string>& ChatOnlyFields() {
  static const std::set<std::string> k = {"messages",    "max_completion_tokens", "top_logprobs", "tools",
                                          "tool_choice", "parallel_tool_calls",   "chat_template_kwargs",
                                          "reasoning_effort"};
  return k;
}
const std::set<std::string>& CompletionOnlyFields() {
  static const std::set<std::string> k = {"prompt", "echo", "suffix", "best_of"};
  return k;
}

// The grammar dialect: xgrammar EBNF / GBNF writes "::=", Lark writes "name: ...".
Kind GrammarKind(const std::string& g) { return g.find("::=") != std::string::npos ? Kind::kGrammar : Kind::kLark; }

Err SetOnce(StructuredOutput* out, const std::string& param, Kind kind, std::string source, bool strict) {
  if (out->kind != Kind::kNone) {
    return BadRequest(absl::StrCat("'", param, "' and '", out->param,
                                   "' both ask for a structured output; send one"),
                      param, "invalid_value");
  }
  out->param = param;
  out->kind = kind;
  out->source = std::move(source);
  out->strict = strict;
  return std::nullopt;
}

// A schema given as an object (or, as vLLM also takes it, a string holding one).
Err SchemaText(const ojson& v, const std::string& param, std::string* out) {
  if (v.is_object() || v.is_boolean()) {
    *out = DumpJson(v);
    return std::nullopt;
  }
  if (v.is_string()) {
    auto parsed = ParseOrderedJson(v.get<std::string>());
    if (!parsed.ok() || !(parsed->is_object() || parsed->is_boolean())) {
      return BadRequest(absl::StrCat("'", param, "' is not a JSON schema (an object, or a string holding one)"), param);
    }
    *out = DumpJson(*parsed);
    return std::nullopt;
  }
  return TypeError(param, "a JSON schema object");
}

Err ChoiceText(const ojson& v, const std::string& param, std::string* out) {
  if (!v.is_array() || v.empty()) return TypeError(param, "a non-empty array of strings");
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) return TypeError(param + "[" + std::to_string(i) + "]", "a string");
  }
  *out = DumpJson(v);
  return std::nullopt;
}

Err StringField(const ojson& v, const std::string& param, std::string* out) {
  if (!v.is_string() || v.get<std::string>().empty()) return TypeError(param, "a non-empty string");
  *out = v.get<std::string>();
  return std::nullopt;
}

Err ParseResponseFormat(const ojson& rf, StructuredOutput* out) {
  if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string()) {
    return TypeError("response_format", "an object with a string 'type'");
  }
  const std::string t = rf["type"].get<std::string>();
  if (t == "text") return std::nullopt;
  if (t == "json_object") {
    // llama-server: {"type": "json_object", "schema": {...}} constrains to the schema.
    if (rf.contains("schema") && !rf["schema"].is_null()) {
      std::string s;
      if (auto e = SchemaText(rf["schema"], "response_format.schema", &s)) return e;
      return SetOnce(out, "response_format", Kind::kJsonSchema, std::move(s), false);
    }
    return SetOnce(out, "response_format", Kind::kJsonObject, "", false);
  }
  if (t == "json_schema") {
    if (!rf.contains("json_schema") || !rf["json_schema"].is_object()) {
      return BadRequest("'response_format.json_schema' is required for type 'json_schema'", "response_format.json_schema",
                        "missing_required_parameter");
    }
    const ojson& js = rf["json_schema"];
    for (auto it = js.begin(); it != js.end(); ++it) {
      const std::string& k = it.key();
      if (k != "name" && k != "schema" && k != "strict" && k != "description") {
        return BadRequest(absl::StrCat("'response_format.json_schema.", k, "' is not a field of json_schema (name, "
                                       "schema, strict, description)"),
                          "response_format.json_schema." + k, "unknown_parameter");
      }
    }
    if (js.contains("name") && !js["name"].is_string()) return TypeError("response_format.json_schema.name", "a string");
    bool strict = false;
    if (js.contains("strict") && !js["strict"].is_null()) {
      if (!js["strict"].is_boolean()) return TypeError("response_format.json_schema.strict", "a boolean");
      strict = js["strict"].get<bool>();
    }
    std::string s = "{}";  // OpenAI: no schema = any JSON value
    if (js.contains("schema") && !js["schema"].is_null()) {
      if (auto e = SchemaText(js["schema"], "response_format.json_schema.schema", &s)) return e;
    }
    return SetOnce(out, "response_format", Kind::kJsonSchema, std::move(s), strict);
  }
  if (t == "structural_tag") {
    return BadRequest("response_format type 'structural_tag' is not supported (use json_schema, a regex or a grammar)",
                      "response_format.type", "unsupported_value");
  }
  return BadRequest("unknown response_format type '" + t + "' (text, json_object, json_schema)", "response_format.type");
}

}  // namespace

std::optional<ApiError> CheckKnownFields(const json& o, bool chat) {
  for (auto it = o.begin(); it != o.end(); ++it) {
    const std::string& k = it.key();
    if (SharedFields().count(k) || (chat ? ChatOnlyFields() : CompletionOnlyFields()).count(k)) continue;
    std::string hint;
    if (!chat && ChatOnlyFields().count(k)) hint = " (a /v1/chat/completions field)";
    if (chat && CompletionOnlyFields().count(k)) hint = " (a /v1/completions field)";
    if (k == "functions" || k == "function_call") hint = " (deprecated by OpenAI: use 'tools' and 'tool_choice')";
    return BadRequest(absl::StrCat("unknown field '", k.substr(0, 64), "'", hint,
                                   "; every field this server accepts is listed in docs/SERVING.md"),
                      k.substr(0, 64), "unknown_parameter");
  }
  return std::nullopt;
}

bool HasStructuredOutput(const json& o) {
  for (const char* k : {"response_format", "structured_outputs", "guided_json", "guided_regex", "guided_choice",
                        "guided_grammar", "guided_decoding_backend", "json_schema", "grammar"}) {
    auto it = o.find(k);
    if (it != o.end() && !it->is_null()) return true;
  }
  return false;
}

std::optional<ApiError> ParseStructuredOutput(const ojson& o, StructuredOutput* out) {
  auto get = [&](const char* k) -> const ojson* {
    auto it = o.find(k);
    return (it == o.end() || it->is_null()) ? nullptr : &*it;
  };
  if (const ojson* rf = get("response_format")) {
    if (auto e = ParseResponseFormat(*rf, out)) return e;
  }
  if (const ojson* so = get("structured_outputs")) {
    if (!so->is_object()) return TypeError("structured_outputs", "an object");
    for (auto it = so->begin(); it != so->end(); ++it) {
      const std::string& k = it.key();
      const std::string p = "structured_outputs." + k;
      const ojson& v = it.value();
      if (v.is_null()) continue;
      std::string src;
      if (k == "json") {
        if (auto e = SchemaText(v, p, &src)) return e;
        if (auto e = SetOnce(out, p, Kind::kJsonSchema, std::move(src), false)) return e;
      } else if (k == "regex") {
        if (auto e = StringField(v, p, &src)) return e;
        if (auto e = SetOnce(out, p, Kind::kRegex, std::move(src), false)) return e;
      } else if (k == "choice") {
        if (auto e = ChoiceText(v, p, &src)) return e;
        if (auto e = SetOnce(out, p, Kind::kChoice, std::move(src), false)) return e;
      } else if (k == "grammar") {
        if (auto e = StringField(v, p, &src)) return e;
        const Kind gk = GrammarKind(src);
        if (auto e = SetOnce(out, p, gk, std::move(src), false)) return e;
      } else if (k == "json_object") {
        if (!v.is_boolean()) return TypeError(p, "a boolean");
        if (v.get<bool>()) {
          if (auto e = SetOnce(out, p, Kind::kJsonObject, "", false)) return e;
        }
      } else {
        return BadRequest(absl::StrCat("'", p, "' is not supported (json, regex, choice, grammar, json_object)"), p,
                          "unsupported_parameter");
      }
    }
  }
  std::string src;
  if (const ojson* v = get("guided_json")) {
    if (auto e = SchemaText(*v, "guided_json", &src)) return e;
    if (auto e = SetOnce(out, "guided_json", Kind::kJsonSchema, std::move(src), false)) return e;
  }
  if (const ojson* v = get("guided_regex")) {
    if (auto e = StringField(*v, "guided_regex", &src)) return e;
    if (auto e = SetOnce(out, "guided_regex", Kind::kRegex, std::move(src), false)) return e;
  }
  if (const ojson* v = get("guided_choice")) {
    if (auto e = ChoiceText(*v, "guided_choice", &src)) return e;
    if (auto e = SetOnce(out, "guided_choice", Kind::kChoice, std::move(src), false)) return e;
  }
  if (const ojson* v = get("guided_grammar")) {
    if (auto e = StringField(*v, "guided_grammar", &src)) return e;
    const Kind gk = GrammarKind(src);
    if (auto e = SetOnce(out, "guided_grammar", gk, std::move(src), false)) return e;
  }
  if (const ojson* v = get("json_schema")) {  // llama-server
    if (auto e = SchemaText(*v, "json_schema", &src)) return e;
    if (auto e = SetOnce(out, "json_schema", Kind::kJsonSchema, std::move(src), false)) return e;
  }
  if (const ojson* v = get("grammar")) {  // llama-server: GBNF
    if (auto e = StringField(*v, "grammar", &src)) return e;
    const Kind gk = GrammarKind(src);
    if (auto e = SetOnce(out, "grammar", gk, std::move(src), false)) return e;
  }
  if (const ojson* v = get("guided_decoding_backend")) {
    if (!v->is_string()) return TypeError("guided_decoding_backend", "a string");
    const std::string b = v->get<std::string>();
    if (b != "xgrammar" && b != "auto" && !b.empty()) {
      return BadRequest("'guided_decoding_backend' '" + b.substr(0, 32) + "' is not available (this server uses xgrammar)",
                        "guided_decoding_backend", "unsupported_value");
    }
  }
  return std::nullopt;
}

std::optional<ApiError> ParseSamplingExtras(const json& o, CommonRequest* c) {
  auto get = [&](const char* k) -> const json* {
    auto it = o.find(k);
    return (it == o.end() || it->is_null()) ? nullptr : &*it;
  };
  if (const json* v = get("repetition_penalty")) {
    if (!v->is_number()) return TypeError("repetition_penalty", "a number");
    const double r = v->get<double>();
    if (!std::isfinite(r) || r <= 0 || r > 10) {
      return BadRequest("'repetition_penalty' must be > 0 and <= 10, got " + DumpJson(*v), "repetition_penalty");
    }
    c->sampling.repetition_penalty = static_cast<float>(r);
  }
  if (const json* v = get("min_tokens")) {
    if (!v->is_number_integer() || v->get<int64_t>() < 0 || v->get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return TypeError("min_tokens", "a non-negative integer");
    }
    c->min_tokens = static_cast<int32_t>(v->get<int64_t>());
    if (c->max_tokens > 0 && c->min_tokens > c->max_tokens) {
      return BadRequest(absl::StrCat("'min_tokens' (", c->min_tokens, ") must not exceed 'max_tokens' (", c->max_tokens,
                                     ")"),
                        "min_tokens");
    }
  }
  for (auto [key, field] : {std::pair{"ignore_eos", &c->ignore_eos},
                            std::pair{"include_stop_str_in_output", &c->include_stop_str_in_output},
                            std::pair{"skip_special_tokens", &c->skip_special_tokens}}) {
    if (const json* v = get(key)) {
      if (!v->is_boolean()) return TypeError(key, "a boolean");
      *field = v->get<bool>();
    }
  }
  if (const json* v = get("stop_token_ids")) {
    if (!v->is_array()) return TypeError("stop_token_ids", "an array of token ids");
    if (v->size() > 64) return BadRequest("'stop_token_ids' has more than 64 entries", "stop_token_ids");
    for (size_t i = 0; i < v->size(); ++i) {
      const json& t = (*v)[i];
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return TypeError("stop_token_ids[" + std::to_string(i) + "]", "a non-negative token id");
      }
      c->stop_token_ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
  }
  if (const json* v = get("logit_bias")) {
    if (!v->is_object()) return TypeError("logit_bias", "an object of token id -> bias");
    if (v->size() > 300) return BadRequest("'logit_bias' has more than 300 entries", "logit_bias");
    for (auto it = v->begin(); it != v->end(); ++it) {
      const std::string& k = it.key();
      const std::string p = "logit_bias." + k.substr(0, 32);
      const bool digits = !k.empty() && k.size() <= 10 && std::all_of(k.begin(), k.end(), ::isdigit);
      if (!digits || std::stoll(k) > std::numeric_limits<int32_t>::max()) {
        return BadRequest("'logit_bias' keys must be token ids (decimal strings), got '" + k.substr(0, 32) + "'", p);
      }
      if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < -100 ||
          it->get<double>() > 100) {
        return BadRequest("'" + p + "' must be a number between -100 and 100", p);
      }
      c->logit_bias.emplace_back(static_cast<int32_t>(std::stoll(k)), static_cast<float>(it->get<double>()));
    }
  }
  return std::nullopt;
}

}  // namespace moe::gateway
