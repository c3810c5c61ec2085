#include "common/text/chat.h"

#include <fstream>
#include <sstream>

#include "common/base/json.h"
#include "common/base/status.h"
#include "common/text/py_json.h"
#include "common/text/utf8.h"

namespace moe::text {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kGlmToolsPreamble =
    "<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
constexpr std::string_view kGlmToolsPostamble =
    "\n</tools>\n\nFor each function call, output the function name and arguments within the following XML "
    "format:\n<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value>"
    "<arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>...</tool_call>";

constexpr std::string_view kDsBos = "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
constexpr std::string_view kDsEos = "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
// <｜User｜>, <｜Assistant｜>, tool markers (U+FF5C fullwidth bar, U+2581 lower block).
#define FW "\xEF\xBD\x9C"
#define LB "\xE2\x96\x81"
constexpr std::string_view kDsUser = "<" FW "User" FW ">";
constexpr std::string_view kDsAssistant = "<" FW "Assistant" FW ">";
constexpr std::string_view kDsCallsBegin = "<" FW "tool" LB "calls" LB "begin" FW ">";
constexpr std::string_view kDsCallsEnd = "<" FW "tool" LB "calls" LB "end" FW ">";
constexpr std::string_view kDsCallBegin = "<" FW "tool" LB "call" LB "begin" FW ">";
constexpr std::string_view kDsCallEnd = "<" FW "tool" LB "call" LB "end" FW ">";
constexpr std::string_view kDsSep = "<" FW "tool" LB "sep" FW ">";
constexpr std::string_view kDsOutputsBegin = "<" FW "tool" LB "outputs" LB "begin" FW ">";
constexpr std::string_view kDsOutputsEnd = "<" FW "tool" LB "outputs" LB "end" FW ">";
constexpr std::string_view kDsOutputBegin = "<" FW "tool" LB "output" LB "begin" FW ">";
constexpr std::string_view kDsOutputEnd = "<" FW "tool" LB "output" LB "end" FW ">";
#undef FW
#undef LB

std::string StripChars(std::string_view s, char c, bool left, bool right) {
  size_t a = 0, b = s.size();
  if (left) while (a < b && s[a] == c) ++a;
  if (right) while (b > a && s[b - 1] == c) --b;
  return std::string(s.substr(a, b - a));
}

std::string SplitFirst(std::string_view s, std::string_view sep) {
  const size_t p = s.find(sep);
  return std::string(p == std::string_view::npos ? s : s.substr(0, p));
}
std::string SplitLast(std::string_view s, std::string_view sep) {
  const size_t p = s.rfind(sep);
  return std::string(p == std::string_view::npos ? s : s.substr(p + sep.size()));
}

absl::StatusOr<ojson> ArgsObject(const ToolCall& tc) {
  if (tc.arguments.is_object()) return tc.arguments;
  if (tc.arguments.is_string()) {
    auto j = ParseOrderedJson(tc.arguments.get<std::string>());
    if (j.ok() && j->is_object()) return *std::move(j);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tool call '", tc.name, "': arguments must be a JSON object (or a string holding one)"));
}

// The renderers write the template's text with Markup() and the request's with Client()
// (prompt.h): the tokenizer then never turns client text into control tokens.
absl::StatusOr<ChatPrompt> RenderGlm(const ChatRequest& r) {
  ChatPromptBuilder out;
  out.Markup("[gMASK]<sop>");
  if (r.tools.is_array() && !r.tools.empty()) {
    out.Markup(kGlmToolsPreamble);
    for (const auto& t : r.tools) {
      out.Markup("\n");
      out.Client(PyJsonDumps(t));
    }
    out.Markup(kGlmToolsPostamble);
  }
  int last_user = -1;
  for (size_t i = 0; i < r.messages.size(); ++i) {
    if (r.messages[i].role == "user") last_user = static_cast<int>(i);
  }
  for (size_t i = 0; i < r.messages.size(); ++i) {
    const ChatMessage& m = r.messages[i];
    const std::string text = m.content.value_or("");
    if (m.role == "system") {
      out.Markup("<|system|>");
      out.Client(text);
    } else if (m.role == "user") {
      out.Markup("<|user|>");
      out.Client(text);
    } else if (m.role == "assistant") {
      out.Markup("<|assistant|>");
      std::string content = text, reasoning;
      if (m.reasoning_content.has_value()) {
        reasoning = *m.reasoning_content;
      } else if (content.find("</think>") != std::string::npos) {
        reasoning = StripChars(SplitLast(StripChars(SplitFirst(content, "</think>"), '\n', false, true), "<think>"),
                               '\n', true, false);
        content = StripChars(SplitLast(content, "</think>"), '\n', true, false);
      }
      const std::string rs = PyStrip(reasoning);
      if ((!r.clear_thinking || static_cast<int>(i) > last_user) && !rs.empty()) {
        out.Markup("<think>");
        out.Client(rs);
        out.Markup("</think>");
      } else {
        out.Markup("</think>");
      }
      out.Client(PyStrip(content));
      for (const ToolCall& tc : m.tool_calls) {
        out.Markup("<tool_call>");
        out.Client(tc.name);
        MOE_ASSIGN_OR_RETURN(ojson args, ArgsObject(tc));
        for (auto it = args.begin(); it != args.end(); ++it) {
          out.Markup("<arg_key>");
          out.Client(it.key());
          out.Markup("</arg_key><arg_value>");
          out.Client(it.value().is_string() ? it.value().get<std::string>() : PyJsonDumps(it.value()));
          out.Markup("</arg_value>");
        }
        out.Markup("</tool_call>");
      }
    } else if (m.role == "tool" || m.role == "observation") {
      const bool first_of_run =
          i == 0 || (r.messages[i - 1].role != "tool" && r.messages[i - 1].role != "observation");
      if (first_of_run) out.Markup("<|observation|>");
      out.Markup("<tool_response>");
      out.Client(text);
      out.Markup("</tool_response>");
    } else {
      return absl::InvalidArgumentError(absl::StrCat("GLM chat: unknown role '", m.role, "' in message ", i));
    }
  }
  if (r.add_generation_prompt) out.Markup(r.enable_thinking ? "<|assistant|><think>" : "<|assistant|></think>");
  return out.Take();
}

absl::StatusOr<ChatPrompt> RenderDeepSeekV3(const ChatRequest& r) {
  ChatPromptBuilder out;
  out.Markup(kDsBos);
  bool first_sp = true;
  for (const auto& m : r.messages) {
    if (m.role != "system") continue;
    if (!first_sp) out.Markup("\n\n");
    out.Client(m.content.value_or(""));
    first_sp = false;
  }
  bool is_first = false, is_tool = false, is_output_first = true;
  for (size_t i = 0; i < r.messages.size(); ++i) {
    const ChatMessage& m = r.messages[i];
    if (m.role == "system") continue;
    if (m.role == "user") {
      is_tool = false;
      out.Markup(kDsUser);
      out.Client(m.content.value_or(""));
    } else if (m.role == "assistant" && m.has_tool_calls) {
      is_tool = false;
      for (const ToolCall& tc : m.tool_calls) {
        const std::string args =
            tc.arguments.is_string() ? tc.arguments.get<std::string>() : PyJsonDumps(tc.arguments);
        if (!is_first) {
          out.Markup(kDsAssistant);
          out.Client(m.content.value_or(""));
          out.Markup(kDsCallsBegin);
          is_first = true;
        } else {
          out.Markup("\n");
        }
        out.Markup(kDsCallBegin);
        out.Client(tc.type);
        out.Markup(kDsSep);
        out.Client(tc.name);
        out.Markup("\n```json\n");
        out.Client(args);
        out.Markup("\n```");
        out.Markup(kDsCallEnd);
      }
      out.Markup(kDsCallsEnd);
      out.Markup(kDsEos);
    } else if (m.role == "assistant") {
      if (is_tool) {
        out.Markup(kDsOutputsEnd);
        out.Client(m.content.value_or(""));
        out.Markup(kDsEos);
        is_tool = false;
      } else {
        std::string content = m.content.value_or("");
        if (content.find("</think>") != std::string::npos) content = SplitLast(content, "</think>");
        out.Markup(kDsAssistant);
        out.Client(content);
        out.Markup(kDsEos);
      }
    } else if (m.role == "tool") {
      is_tool = true;
      if (is_output_first) {
        out.Markup(kDsOutputsBegin);
        is_output_first = false;
      }
      out.Markup(kDsOutputBegin);
      out.Client(m.content.value_or(""));
      out.Markup(kDsOutputEnd);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("DeepSeek-V3 chat: unknown role '", m.role, "' in message ", i));
    }
  }
  if (is_tool) out.Markup(kDsOutputsEnd);
  if (r.add_generation_prompt && !is_tool) out.Markup(kDsAssistant);
  return out.Take();
}

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

absl::StatusOr<std::optional<std::string>> ContentOf(const ojson& m, size_t index) {
  if (!m.contains("content") || m["content"].is_null()) return std::optional<std::string>();
  const auto& c = m["content"];
  if (c.is_string()) return std::optional<std::string>(c.get<std::string>());
  if (c.is_array()) {
    std::string s;
    for (const auto& part : c) {
      if (part.is_string()) {
        s += part.get<std::string>();
      } else if (part.is_object() && part.value("type", "") == "text" && part.contains("text") &&
                 part["text"].is_string()) {
        s += part["text"].get<std::string>();
      } else if (!part.is_object()) {
        return absl::InvalidArgumentError(absl::StrCat("message ", index, ": content part is not text"));
      }
    }
    return std::optional<std::string>(s);
  }
  return absl::InvalidArgumentError(absl::StrCat("message ", index, ": 'content' must be a string, null or a list"));
}

}  // namespace

const char* ChatFormatName(ChatFormat f) { return f == ChatFormat::kGlm ? "glm" : "deepseek_v3"; }

absl::StatusOr<ChatFormat> ParseChatFormat(std::string_view name) {
  if (name == "glm" || name == "glm5" || name == "glm4") return ChatFormat::kGlm;
  if (name == "deepseek_v3" || name == "deepseek-v3" || name == "deepseek") return ChatFormat::kDeepSeekV3;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown chat format '", AV(name), "' (known: glm, deepseek_v3)"));
}

absl::StatusOr<ChatFormat> DetectChatFormatFromTemplate(std::string_view t, std::string_view origin) {
  if (t.find("[gMASK]<sop>") != std::string_view::npos && t.find("<|assistant|>") != std::string_view::npos) {
    return ChatFormat::kGlm;
  }
  if (t.find(kDsAssistant) != std::string_view::npos && t.find(kDsCallsBegin) != std::string_view::npos) {
    return ChatFormat::kDeepSeekV3;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown chat template in ", AV(origin),
      ": neither GLM ([gMASK]<sop>, <|assistant|>) nor DeepSeek-V3 markers; choose one with a chat-format flag"));
}

absl::StatusOr<ChatFormat> DetectChatFormat(const std::string& dir) {
  const std::string jinja = dir + "/chat_template.jinja";
  if (auto t = ReadText(jinja); t.ok()) return DetectChatFormatFromTemplate(*t, jinja);
  const std::string cfg_path = dir + "/tokenizer_config.json";
  auto cfg_text = ReadText(cfg_path);
  if (!cfg_text.ok()) {
    return absl::NotFoundError(absl::StrCat("no chat template in ", dir, ": neither chat_template.jinja nor ",
                                            "tokenizer_config.json exists"));
  }
  ojson cfg = ojson::parse(*cfg_text, nullptr, false);
  if (cfg.is_discarded() || !cfg.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(cfg_path, ": malformed JSON"));
  }
  if (!cfg.contains("chat_template")) {
    return absl::NotFoundError(absl::StrCat(cfg_path, ": no 'chat_template' (and no chat_template.jinja)"));
  }
  const auto& ct = cfg["chat_template"];
  if (ct.is_string()) return DetectChatFormatFromTemplate(ct.get<std::string>(), cfg_path);
  if (ct.is_array()) {  // [{"name": "default", "template": ...}, ...]
    for (const auto& e : ct) {
      if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string()) {
        return DetectChatFormatFromTemplate(e["template"].get<std::string>(), cfg_path);
      }
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(cfg_path, ": 'chat_template' has no default template string"));
}

absl::StatusOr<std::vector<ChatMessage>> ParseMessagesJson(const ojson& msgs) {
  if (!msgs.is_array()) return absl::InvalidArgumentError("chat: 'messages' must be an array");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const auto& m = msgs[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat("chat: message ", i, " needs a string 'role'"));
    }
    ChatMessage cm;
    cm.role = m["role"].get<std::string>();
    if (cm.role != "system" && cm.role != "user" && cm.role != "assistant" && cm.role != "tool" &&
        cm.role != "observation") {
      return absl::InvalidArgumentError(absl::StrCat("chat: message ", i, " has unknown role '", cm.role, "'"));
    }
    MOE_ASSIGN_OR_RETURN(cm.content, ContentOf(m, i));
    if (m.contains("reasoning_content") && m["reasoning_content"].is_string()) {
      cm.reasoning_content = m["reasoning_content"].get<std::string>();
    }
    if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      if (!m["tool_calls"].is_array()) {
        return absl::InvalidArgumentError(absl::StrCat("chat: message ", i, ": 'tool_calls' must be an array"));
      }
      cm.has_tool_calls = true;
      for (const auto& tc : m["tool_calls"]) {
        const ojson& f = tc.contains("function") ? tc["function"] : tc;
        if (!f.is_object() || !f.contains("name") || !f["name"].is_string()) {
          return absl::InvalidArgumentError(absl::StrCat("chat: message ", i, ": tool call without a 'name'"));
        }
        ToolCall call;
        call.name = f["name"].get<std::string>();
        if (f.contains("arguments")) call.arguments = f["arguments"];
        if (tc.contains("type") && tc["type"].is_string()) call.type = tc["type"].get<std::string>();
        if (tc.contains("id") && tc["id"].is_string()) call.id = tc["id"].get<std::string>();
        cm.tool_calls.push_back(std::move(call));
      }
    }
    out.push_back(std::move(cm));
  }
  return out;
}

absl::StatusOr<ChatRequest> ParseChatRequestJson(std::string_view text) {
  auto parsed = ParseOrderedJson(text);
  if (!parsed.ok()) return Annotate(parsed.status(), "chat");
  const ojson j = *std::move(parsed);
  ChatRequest r;
  try {
    if (j.is_array()) {
      MOE_ASSIGN_OR_RETURN(r.messages, ParseMessagesJson(j));
      return r;
    }
    if (!j.is_object() || !j.contains("messages")) {
      return absl::InvalidArgumentError("chat: expected a messages array or an object with 'messages'");
    }
    MOE_ASSIGN_OR_RETURN(r.messages, ParseMessagesJson(j["messages"]));
    if (j.contains("tools") && !j["tools"].is_null()) {
      if (!j["tools"].is_array()) return absl::InvalidArgumentError("chat: 'tools' must be an array");
      r.tools = j["tools"];
    }
    const ojson kw = j.contains("chat_template_kwargs") ? j["chat_template_kwargs"] : j;
    r.add_generation_prompt = j.value("add_generation_prompt", kw.value("add_generation_prompt", true));
    r.enable_thinking = kw.value("enable_thinking", true);
    r.clear_thinking = kw.value("clear_thinking", true);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("chat: unexpected JSON shape: ", e.what()));
  }
  return r;
}

absl::StatusOr<ChatPrompt> RenderChatPrompt(ChatFormat format, const ChatRequest& request) {
  switch (format) {
    case ChatFormat::kGlm:
      return RenderGlm(request);
    case ChatFormat::kDeepSeekV3:
      return RenderDeepSeekV3(request);
  }
  return absl::InvalidArgumentError("unknown chat format");
}

absl::StatusOr<std::string> RenderChat(ChatFormat format, const ChatRequest& request) {
  MOE_ASSIGN_OR_RETURN(ChatPrompt p, RenderChatPrompt(format, request));
  return std::move(p.text);
}

}  // namespace moe::text
