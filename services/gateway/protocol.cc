#include "services/gateway/protocol.h"

#include "services/gateway/request_fields.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace moe::gateway {
namespace {

using json = nlohmann::json;
using Err = std::optional<ApiError>;

// Field readers: a missing or null field leaves *out untouched.
Err ReadBool(const json& o, const char* key, bool* out) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return TypeError(key, "a boolean");
  *out = it->get<bool>();
  return std::nullopt;
}

Err ReadString(const json& o, const char* key, std::string* out, const std::string& param) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) return TypeError(param, "a string");
  *out = it->get<std::string>();
  return std::nullopt;
}

Err ReadNumber(const json& o, const char* key, double lo, double hi, float* out) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return TypeError(key, "a number");
  double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    return BadRequest(std::string("'") + key + "' must be between " + DumpJson(json(lo)) + " and " +
                          DumpJson(json(hi)) + ", got " + DumpJson(*it),
                      key);
  }
  *out = static_cast<float>(v);
  return std::nullopt;
}

Err ReadInt(const json& o, const char* key, int64_t lo, int64_t hi, int64_t* out, bool* present = nullptr) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) {
    // 3.0 is accepted as an integer by most servers; 3.5 is not.
    if (it->is_number_float()) {
      double d = it->get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) {
        int64_t v = static_cast<int64_t>(d);
        if (v < lo || v > hi) {
          return BadRequest(std::string("'") + key + "' must be between " + std::to_string(lo) +
                                " and " + std::to_string(hi) + ", got " + DumpJson(*it),
                            key);
        }
        *out = v;
        if (present) *present = true;
        return std::nullopt;
      }
    }
    return TypeError(key, "an integer");
  }
  int64_t v;
  if (it->is_number_unsigned()) {
    uint64_t u = it->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return BadRequest(std::string("'") + key + "' is out of range", key);
    }
    v = static_cast<int64_t>(u);
  } else {
    v = it->get<int64_t>();
  }
  if (v < lo || v > hi) {
    return BadRequest(std::string("'") + key + "' must be between " + std::to_string(lo) + " and " +
                          std::to_string(hi) + ", got " + std::to_string(v),
                      key);
  }
  *out = v;
  if (present) *present = true;
  return std::nullopt;
}

Err ParseStop(const json& o, const ProtocolLimits& limits, std::vector<std::string>* out) {
  auto it = o.find("stop");
  if (it == o.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) {
    if (it->get<std::string>().empty()) return BadRequest("'stop' strings must not be empty", "stop");
    out->push_back(it->get<std::string>());
    return std::nullopt;
  }
  if (!it->is_array()) return TypeError("stop", "a string or an array of strings");
  if (static_cast<int>(it->size()) > limits.max_stop) {
    return BadRequest("'stop' has " + std::to_string(it->size()) + " entries; at most " +
                          std::to_string(limits.max_stop) + " are allowed",
                      "stop");
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const json& s = (*it)[i];
    std::string p = "stop[" + std::to_string(i) + "]";
    if (!s.is_string()) return TypeError(p, "a string");
    if (s.get<std::string>().empty()) return BadRequest("'" + p + "' must not be empty", p);
    out->push_back(s.get<std::string>());
  }
  return std::nullopt;
}

// Parses the fields both endpoints share. `chat` selects the chat spelling
// of logprobs (bool + top_logprobs) vs the legacy one (int).
Err ParseCommon(const json& o, const ProtocolLimits& limits, bool chat, CommonRequest* c) {
  // model
  auto mit = o.find("model");
  if (mit == o.end() || mit->is_null()) return BadRequest("'model' is required", "model", "missing_required_parameter");
  if (!mit->is_string()) return TypeError("model", "a string");
  c->model = mit->get<std::string>();
  if (std::find(limits.model_names.begin(), limits.model_names.end(), c->model) == limits.model_names.end()) {
    std::string known;
    for (const auto& m : limits.model_names) known += (known.empty() ? "" : ", ") + m;
    // OpenAI's answer for an unknown model: 404 model_not_found.
    ApiError e = BadRequest("The model '" + c->model.substr(0, 256) + "' does not exist; this server serves: " + known,
                            "model", "model_not_found");
    e.http_status = 404;
    e.type = "not_found_error";
    return e;
  }
  int64_t v = 0;
  bool present = false;
  if (auto e = ReadInt(o, "max_tokens", 1, std::numeric_limits<int32_t>::max(), &v, &present)) return e;
  if (present) c->max_tokens = static_cast<int32_t>(v);
  if (chat) {
    present = false;
    if (auto e = ReadInt(o, "max_completion_tokens", 1, std::numeric_limits<int32_t>::max(), &v, &present)) return e;
    if (present) c->max_tokens = static_cast<int32_t>(v);
  }
  SamplingParams& s = c->sampling;
  if (auto e = ReadNumber(o, "temperature", 0.0, 2.0, &s.temperature)) return e;
  if (auto e = ReadNumber(o, "top_p", 0.0, 1.0, &s.top_p)) return e;
  if (o.contains("top_p") && o["top_p"].is_number() && s.top_p <= 0.0f) {
    return BadRequest("'top_p' must be greater than 0", "top_p");
  }
  v = 0;
  present = false;
  if (auto e = ReadInt(o, "top_k", -1, 1 << 20, &v, &present)) return e;
  if (present) s.top_k = v <= 0 ? 0 : static_cast<int32_t>(v);
  if (auto e = ReadNumber(o, "min_p", 0.0, 1.0, &s.min_p)) return e;
  if (auto e = ReadNumber(o, "presence_penalty", -2.0, 2.0, &s.presence_penalty)) return e;
  if (auto e = ReadNumber(o, "frequency_penalty", -2.0, 2.0, &s.frequency_penalty)) return e;
  present = false;
  if (auto e = ReadInt(o, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), &v,
                       &present)) {
    return e;
  }
  if (present) {
    s.has_seed = true;
    s.seed = static_cast<uint64_t>(v);
  }
  int64_t n = 1;
  if (auto e = ReadInt(o, "n", 1, limits.max_n, &n)) {
    if (e->code != "invalid_type") {
      e->message = "'n' must be between 1 and " + std::to_string(limits.max_n) + ", got " + DumpJson(o["n"]);
    }
    return e;
  }
  c->n = static_cast<int>(n);
  if (auto e = ParseStop(o, limits, &c->stop)) return e;
  if (auto e = ReadBool(o, "stream", &c->stream)) return e;
  auto so = o.find("stream_options");
  if (so != o.end() && !so->is_null()) {
    if (!so->is_object()) return TypeError("stream_options", "an object");
    if (!c->stream) {
      return BadRequest("'stream_options' is only allowed when 'stream' is true", "stream_options");
    }
    auto iu = so->find("include_usage");
    if (iu != so->end() && !iu->is_null()) {
      if (!iu->is_boolean()) return TypeError("stream_options.include_usage", "a boolean");
      c->include_usage = iu->get<bool>();
    }
  }
  if (auto e = ReadString(o, "user", &c->user, "user")) return e;

  if (chat) {
    bool lp = false;
    if (auto e = ReadBool(o, "logprobs", &lp)) return e;
    int64_t top = 0;
    present = false;
    if (auto e = ReadInt(o, "top_logprobs", 0, limits.max_top_logprobs, &top, &present)) return e;
    if (present && !lp && top > 0) {
      return BadRequest("'top_logprobs' requires 'logprobs' to be true", "top_logprobs");
    }
    c->logprobs = lp ? static_cast<int32_t>(top) : -1;
  } else {
    int64_t lp = 0;
    present = false;
    if (auto e = ReadInt(o, "logprobs", 0, limits.max_completion_logprobs, &lp, &present)) return e;
    c->logprobs = present ? static_cast<int32_t>(lp) : -1;
  }

  if (auto e = ParseSamplingExtras(o, c)) return e;
  return std::nullopt;
}

Err ParseContent(const json& m, const std::string& p, bool allow_null, std::string* out, bool* was_null) {
  auto it = m.find("content");
  *was_null = false;
  if (it == m.end() || it->is_null()) {
    if (!allow_null) return BadRequest("'" + p + ".content' is required", p + ".content", "missing_required_parameter");
    *was_null = true;
    return std::nullopt;
  }
  if (it->is_string()) {
    *out = it->get<std::string>();
    return std::nullopt;
  }
  if (!it->is_array()) return TypeError(p + ".content", "a string or an array of content parts");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& part = (*it)[i];
    std::string pp = p + ".content[" + std::to_string(i) + "]";
    if (!part.is_object()) return TypeError(pp, "an object");
    auto t = part.find("type");
    if (t == part.end() || !t->is_string()) return TypeError(pp + ".type", "a string");
    if (*t != "text") {
      return BadRequest("content part type '" + t->get<std::string>() + "' is not supported (text only)",
                        pp + ".type", "unsupported_value");
    }
    auto tx = part.find("text");
    if (tx == part.end() || !tx->is_string()) return TypeError(pp + ".text", "a string");
    *out += tx->get<std::string>();
  }
  return std::nullopt;
}

Err ParseToolCalls(const json& v, const std::string& p, int max_depth, std::vector<nlohmann::ordered_json>* args_out) {
  if (!v.is_array()) return TypeError(p, "an array");
  for (size_t i = 0; i < v.size(); ++i) {
    const json& tc = v[i];
    std::string pp = p + "[" + std::to_string(i) + "]";
    if (!tc.is_object()) return TypeError(pp, "an object");
    auto f = tc.find("function");
    if (f == tc.end() || !f->is_object()) return TypeError(pp + ".function", "an object");
    auto name = f->find("name");
    if (name == f->end() || !name->is_string()) return TypeError(pp + ".function.name", "a string");
    auto args = f->find("arguments");
    if (args == f->end() || args->is_null()) {
      args_out->emplace_back(nullptr);
      continue;
    }
    if (!args->is_string()) return TypeError(pp + ".function.arguments", "a JSON string");
    auto parsed = ParseOrderedJson(args->get_ref<const std::string&>(), max_depth);
    if (!parsed.ok()) {
      const bool deep = parsed.status().message().find("deeper") != absl::string_view::npos;
      return BadRequest("'" + pp + ".function.arguments' " + std::string(parsed.status().message()) +
                            (deep ? " (--max-json-depth)" : ""),
                        pp + ".function.arguments", deep ? "json_too_deep" : "invalid_json");
    }
    args_out->push_back(*std::move(parsed));
  }
  return std::nullopt;
}

Err ParseMessages(const json& o, int max_depth, std::vector<ChatMessage>* out) {
  auto it = o.find("messages");
  if (it == o.end() || it->is_null()) return BadRequest("'messages' is required", "messages", "missing_required_parameter");
  if (!it->is_array()) return TypeError("messages", "an array");
  if (it->empty()) return BadRequest("'messages' must not be empty", "messages");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return TypeError(p, "an object");
    ChatMessage msg;
    auto r = m.find("role");
    if (r == m.end() || r->is_null()) return BadRequest("'" + p + ".role' is required", p + ".role", "missing_required_parameter");
    if (!r->is_string()) return TypeError(p + ".role", "a string");
    msg.role = r->get<std::string>();
    static const char* kRoles[] = {"system", "developer", "user", "assistant", "tool"};
    if (std::find(std::begin(kRoles), std::end(kRoles), msg.role) == std::end(kRoles)) {
      return BadRequest("unknown role '" + msg.role + "' (system, developer, user, assistant, tool)", p + ".role");
    }
    bool was_null = false;
    bool is_assistant = msg.role == "assistant";
    if (auto e = ParseContent(m, p, is_assistant, &msg.content, &was_null)) return e;
    if (auto e = ReadString(m, "name", &msg.name, p + ".name")) return e;
    if (is_assistant) {
      if (auto e = ReadString(m, "reasoning_content", &msg.reasoning_content, p + ".reasoning_content")) return e;
      auto tc = m.find("tool_calls");
      if (tc != m.end() && !tc->is_null()) {
        if (auto e = ParseToolCalls(*tc, p + ".tool_calls", max_depth, &msg.tool_call_arguments)) return e;
        msg.tool_calls = *tc;
      }
      if (was_null && msg.tool_calls.is_null()) {
        return BadRequest("'" + p + ".content' is required unless tool_calls are given", p + ".content",
                          "missing_required_parameter");
      }
    }
    if (msg.role == "tool") {
      auto id = m.find("tool_call_id");
      if (id == m.end() || id->is_null()) {
        return BadRequest("'" + p + ".tool_call_id' is required for role 'tool'", p + ".tool_call_id",
                          "missing_required_parameter");
      }
      if (!id->is_string()) return TypeError(p + ".tool_call_id", "a string");
      msg.tool_call_id = id->get<std::string>();
    }
    out->push_back(std::move(msg));
  }
  return std::nullopt;
}

Err ParseTools(const json& o, ChatRequest* r) {
  auto it = o.find("tools");
  std::vector<std::string> names;
  if (it != o.end() && !it->is_null()) {
    if (!it->is_array()) return TypeError("tools", "an array");
    for (size_t i = 0; i < it->size(); ++i) {
      const json& t = (*it)[i];
      std::string p = "tools[" + std::to_string(i) + "]";
      if (!t.is_object()) return TypeError(p, "an object");
      auto ty = t.find("type");
      if (ty == t.end() || !ty->is_string() || *ty != "function") {
        return BadRequest("'" + p + ".type' must be \"function\"", p + ".type");
      }
      auto f = t.find("function");
      if (f == t.end() || !f->is_object()) return TypeError(p + ".function", "an object");
      auto name = f->find("name");
      if (name == f->end() || !name->is_string() || name->get<std::string>().empty()) {
        return TypeError(p + ".function.name", "a non-empty string");
      }
      auto params = f->find("parameters");
      if (params != f->end() && !params->is_null() && !params->is_object()) {
        return TypeError(p + ".function.parameters", "an object (JSON Schema)");
      }
      names.push_back(name->get<std::string>());
    }
    if (!it->empty()) r->tools = nlohmann::ordered_json::array();  // filled in key order by ParseChatRequest
  }
  r->tool_choice = r->tools.is_null() ? "none" : "auto";
  auto tc = o.find("tool_choice");
  if (tc != o.end() && !tc->is_null()) {
    if (tc->is_string()) {
      std::string v = tc->get<std::string>();
      if (v != "none" && v != "auto" && v != "required") {
        return BadRequest("'tool_choice' must be \"none\", \"auto\", \"required\" or a function object",
                          "tool_choice");
      }
      if (v != "none" && r->tools.is_null()) {
        return BadRequest("'tool_choice' \"" + v + "\" requires 'tools'", "tool_choice");
      }
      r->tool_choice = v;
    } else if (tc->is_object()) {
      auto f = tc->find("function");
      if (f == tc->end() || !f->is_object() || !f->contains("name") || !(*f)["name"].is_string()) {
        return TypeError("tool_choice.function.name", "a string");
      }
      std::string name = (*f)["name"].get<std::string>();
      if (std::find(names.begin(), names.end(), name) == names.end()) {
        return BadRequest("'tool_choice' names function '" + name + "' that is not in 'tools'",
                          "tool_choice.function.name");
      }
      r->tool_choice = name;
      r->tool_choice_named = true;
    } else {
      return TypeError("tool_choice", "a string or an object");
    }
  }
  return ReadBool(o, "parallel_tool_calls", &r->parallel_tool_calls);
}

// Parses the body, refusing JSON nested deeper than the limit before building it.
template <class Json>
Err ParseBody(std::string_view body, int max_depth, Json* out) {
  if (JsonNestingDepth(body, max_depth) > max_depth) {
    return BadRequest("request body nests JSON deeper than " + std::to_string(max_depth) +
                          " levels (--max-json-depth)",
                      "", "json_too_deep");
  }
  *out = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded()) {
    return BadRequest("request body is not valid JSON", "", "invalid_json");
  }
  if (!out->is_object()) return BadRequest("request body must be a JSON object", "", "invalid_json");
  return std::nullopt;
}

// chat_template_kwargs: template variables for the model's chat template (vLLM/SGLang
// convention). Any JSON value; the text codec refuses keys the template never reads, so
// none is accepted and ignored (TextCodec::EncodeChat).
Err ParseTemplateKwargs(const json& o, bool* present) {
  auto it = o.find("chat_template_kwargs");
  *present = it != o.end() && !it->is_null();
  if (*present && !it->is_object()) return TypeError("chat_template_kwargs", "an object");
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseChatRequest(std::string_view body, const ProtocolLimits& limits, ChatRequest* out) {
  json o;
  if (auto e = ParseBody(body, limits.max_json_depth, &o)) return e;
  if (auto e = CheckKnownFields(o, /*chat=*/true)) return e;
  if (auto e = ParseMessages(o, limits.max_json_depth, &out->messages)) return e;
  if (auto e = ParseCommon(o, limits, /*chat=*/true, &out->common)) return e;
  if (auto e = ParseTools(o, out)) return e;
  if (auto e = ReadString(o, "reasoning_effort", &out->reasoning_effort, "reasoning_effort")) return e;
  bool kwargs = false;
  if (auto e = ParseTemplateKwargs(o, &kwargs)) return e;
  const bool structured = HasStructuredOutput(o);
  if (!out->tools.is_null() || kwargs || structured) {
    // Validated above on the (key-sorted) json; keep the client's key order (the chat
    // template renders them; a model was trained on definitions in the order people write them).
    nlohmann::ordered_json ordered;
    if (auto e = ParseBody(body, limits.max_json_depth, &ordered)) return e;
    if (!out->tools.is_null()) out->tools = ordered["tools"];
    if (kwargs) out->chat_template_kwargs = ordered["chat_template_kwargs"];
    if (structured) {
      if (auto e = ParseStructuredOutput(ordered, &out->common.structured)) return e;
    }
  }
  return std::nullopt;
}

std::optional<ApiError> ParseCompletionRequest(std::string_view body, const ProtocolLimits& limits,
                                               CompletionRequest* out) {
  json o;
  if (auto e = ParseBody(body, limits.max_json_depth, &o)) return e;
  if (auto e = CheckKnownFields(o, /*chat=*/false)) return e;
  auto p = o.find("prompt");
  if (p == o.end() || p->is_null()) return BadRequest("'prompt' is required", "prompt", "missing_required_parameter");
  auto read_ids = [&](const json& arr, const std::string& param, CompletionRequest::Prompt* into) -> Err {
    if (arr.empty()) return BadRequest("'" + param + "' must not be empty", param);
    for (size_t i = 0; i < arr.size(); ++i) {
      if (!arr[i].is_number_integer() || arr[i].get<int64_t>() < 0 ||
          arr[i].get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return TypeError(param + "[" + std::to_string(i) + "]", "a non-negative token id");
      }
      into->tokens.push_back(static_cast<int32_t>(arr[i].get<int64_t>()));
    }
    into->is_tokens = true;
    return std::nullopt;
  };
  if (p->is_string()) {
    out->prompts.push_back({false, p->get<std::string>(), {}});
  } else if (p->is_array()) {
    if (p->empty()) return BadRequest("'prompt' must not be empty", "prompt");
    const json& first = (*p)[0];
    if (first.is_string() || first.is_array()) {
      // A batch: each entry a string or an array of token ids.
      if (static_cast<int>(p->size()) > limits.max_prompts) {
        return BadRequest("'prompt' holds " + std::to_string(p->size()) + " prompts; at most " +
                              std::to_string(limits.max_prompts) + " are allowed",
                          "prompt");
      }
      for (size_t i = 0; i < p->size(); ++i) {
        const json& e = (*p)[i];
        const std::string param = "prompt[" + std::to_string(i) + "]";
        CompletionRequest::Prompt one;
        if (e.is_string()) {
          one.text = e.get<std::string>();
        } else if (e.is_array()) {
          if (auto err = read_ids(e, param, &one)) return err;
        } else {
          return TypeError(param, "a string or an array of token ids (as prompt[0])");
        }
        out->prompts.push_back(std::move(one));
      }
    } else {
      CompletionRequest::Prompt one;
      if (auto e = read_ids(*p, "prompt", &one)) return e;
      out->prompts.push_back(std::move(one));
    }
  } else {
    return TypeError("prompt", "a string, an array of token ids, or an array of those");
  }
  if (auto e = ParseCommon(o, limits, /*chat=*/false, &out->common)) return e;
  if (out->common.max_tokens < 0 && !o.contains("max_tokens")) out->common.max_tokens = 16;  // OpenAI default
  if (auto e = ReadBool(o, "echo", &out->echo)) return e;
  if (out->echo && out->common.logprobs >= 0) {
    return BadRequest("'echo' with 'logprobs' is not supported: this server does not compute the prompt's "
                      "log-probabilities (echo alone is)",
                      "echo", "unsupported_value");
  }
  if (HasStructuredOutput(o)) {
    nlohmann::ordered_json ordered;
    if (auto e = ParseBody(body, limits.max_json_depth, &ordered)) return e;
    if (auto e = ParseStructuredOutput(ordered, &out->common.structured)) return e;
  }
  auto sfx = o.find("suffix");
  if (sfx != o.end() && !sfx->is_null()) {
    return BadRequest("'suffix' is not supported", "suffix", "unsupported_parameter");
  }
  int64_t best_of = out->common.n;
  if (auto e = ReadInt(o, "best_of", 1, 1 << 10, &best_of)) return e;
  if (best_of != out->common.n) {
    return BadRequest("'best_of' different from 'n' is not supported", "best_of", "unsupported_value");
  }
  return std::nullopt;
}

// ---- responses ---------------------------------------------------------------

namespace {

json BytesJson(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// nlohmann throws on invalid UTF-8 when dumping; partial tokens are replaced.
std::string ValidUtf8(const std::string& s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = s[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 2;
    if (ok) {
      out.append(s, i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

double Lp(float v) { return std::isfinite(v) ? static_cast<double>(v) : -9999.0; }

}  // namespace

std::string FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
  }
  return "stop";
}

json UsageJson(const Usage& u) {
  json j{{"prompt_tokens", u.prompt_tokens},
         {"completion_tokens", u.completion_tokens},
         {"total_tokens", u.prompt_tokens + u.completion_tokens}};
  j["prompt_tokens_details"] = json{{"cached_tokens", u.cached_tokens}};
  // OpenAI's fields for predicted outputs; here the worker's speculative drafts.
  j["completion_tokens_details"] = json{{"accepted_prediction_tokens", u.accepted_prediction_tokens},
                                        {"rejected_prediction_tokens", u.rejected_prediction_tokens}};
  return j;
}

json ChatLogprobsJson(const std::vector<LogprobEntry>& entries) {
  json content = json::array();
  for (const auto& e : entries) {
    json top = json::array();
    for (const auto& [tok, lp] : e.top) {
      top.push_back(json{{"token", ValidUtf8(tok)}, {"logprob", Lp(lp)}, {"bytes", BytesJson(tok)}});
    }
    content.push_back(json{{"token", ValidUtf8(e.token)},
                           {"logprob", Lp(e.logprob)},
                           {"bytes", BytesJson(e.token)},
                           {"top_logprobs", top}});
  }
  return json{{"content", content}};
}

json CompletionLogprobsJson(const std::vector<LogprobEntry>& entries, size_t text_offset0) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  size_t off = text_offset0;
  for (const auto& e : entries) {
    tokens.push_back(ValidUtf8(e.token));
    lps.push_back(Lp(e.logprob));
    json t = json::object();
    for (const auto& [tok, lp] : e.top) t[ValidUtf8(tok)] = Lp(lp);
    tops.push_back(t);
    offs.push_back(off);
    off += e.token.size();
  }
  return json{{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

json ChatCompletionJson(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices, const Usage& usage) {
  json cs = json::array();
  for (const auto& c : choices) {
    json msg{{"role", "assistant"}};
    msg["content"] = (c.text.empty() && !c.tool_calls.is_null()) ? json(nullptr) : json(ValidUtf8(c.text));
    if (!c.reasoning.empty()) {
      // Both spellings: vLLM's current clients read "reasoning", older ones and SGLang
      // "reasoning_content".
      msg["reasoning_content"] = ValidUtf8(c.reasoning);
      msg["reasoning"] = msg["reasoning_content"];
    }
    if (!c.tool_calls.is_null()) msg["tool_calls"] = c.tool_calls;
    cs.push_back(json{{"index", c.index},
                      {"message", msg},
                      {"logprobs", c.has_logprobs ? ChatLogprobsJson(c.logprobs) : json(nullptr)},
                      {"finish_reason", c.finish_reason}});
  }
  return json{{"id", meta.id},       {"object", "chat.completion"}, {"created", meta.created},
              {"model", meta.model}, {"choices", cs},               {"usage", UsageJson(usage)}};
}

json CompletionJson(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices, const Usage& usage) {
  json cs = json::array();
  for (const auto& c : choices) {
    cs.push_back(json{{"index", c.index},
                      {"text", ValidUtf8(c.text)},
                      {"logprobs", c.has_logprobs ? CompletionLogprobsJson(c.logprobs, 0) : json(nullptr)},
                      {"finish_reason", c.finish_reason}});
  }
  return json{{"id", meta.id},       {"object", "text_completion"}, {"created", meta.created},
              {"model", meta.model}, {"choices", cs},               {"usage", UsageJson(usage)}};
}

json ChatChunkJson(const ResponseMeta& meta, int index, const json& delta, const std::vector<LogprobEntry>* logprobs,
                   const std::string& finish_reason, bool include_usage_null) {
  json d = delta;
  if (d.contains("content") && d["content"].is_string()) d["content"] = ValidUtf8(d["content"].get<std::string>());
  if (d.contains("reasoning_content") && d["reasoning_content"].is_string()) {
    d["reasoning_content"] = ValidUtf8(d["reasoning_content"].get<std::string>());
    d["reasoning"] = d["reasoning_content"];
  }
  json choice{{"index", index},
              {"delta", d},
              {"logprobs", logprobs ? ChatLogprobsJson(*logprobs) : json(nullptr)},
              {"finish_reason", finish_reason.empty() ? json(nullptr) : json(finish_reason)}};
  json j{{"id", meta.id},       {"object", "chat.completion.chunk"}, {"created", meta.created},
         {"model", meta.model}, {"choices", json::array({choice})}};
  if (include_usage_null) j["usage"] = nullptr;
  return j;
}

json CompletionChunkJson(const ResponseMeta& meta, int index, const std::string& text,
                         const std::vector<LogprobEntry>* logprobs, size_t text_offset0,
                         const std::string& finish_reason, bool include_usage_null) {
  json choice{{"index", index},
              {"text", ValidUtf8(text)},
              {"logprobs", logprobs ? CompletionLogprobsJson(*logprobs, text_offset0) : json(nullptr)},
              {"finish_reason", finish_reason.empty() ? json(nullptr) : json(finish_reason)}};
  json j{{"id", meta.id},       {"object", "text_completion"}, {"created", meta.created},
         {"model", meta.model}, {"choices", json::array({choice})}};
  if (include_usage_null) j["usage"] = nullptr;
  return j;
}

json UsageChunkJson(const ResponseMeta& meta, bool chat, const Usage& usage) {
  return json{{"id", meta.id},
              {"object", chat ? "chat.completion.chunk" : "text_completion"},
              {"created", meta.created},
              {"model", meta.model},
              {"choices", json::array()},
              {"usage", UsageJson(usage)}};
}

}  // namespace moe::gateway
