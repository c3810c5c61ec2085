#include "common/text/chat_parser.h"

#include <algorithm>

#include "common/base/json.h"
#include "common/text/utf8.h"

namespace moe::text {

using ojson = nlohmann::ordered_json;

// Markers of one family's assistant turn (empty: the family has none).
struct ChatOutputParser::Syntax {
  bool think_anywhere;  // <think> may open a block after content (GLM, Qwen); else only at the start
  std::string_view section_open, section_close;
  std::string_view call_open, call_close;
};

namespace {

constexpr std::string_view kThink = "<think>";
constexpr std::string_view kEndThink = "</think>";
#define FW "\xEF\xBD\x9C"  // U+FF5C FULLWIDTH VERTICAL LINE
#define LB "\xE2\x96\x81"  // U+2581 LOWER ONE EIGHTH BLOCK
constexpr std::string_view kDsCallsBegin = "<" FW "tool" LB "calls" LB "begin" FW ">";
constexpr std::string_view kDsCallsEnd = "<" FW "tool" LB "calls" LB "end" FW ">";
constexpr std::string_view kDsCallBegin = "<" FW "tool" LB "call" LB "begin" FW ">";
constexpr std::string_view kDsCallEnd = "<" FW "tool" LB "call" LB "end" FW ">";
constexpr std::string_view kDsSep = "<" FW "tool" LB "sep" FW ">";
#undef FW
#undef LB

const ChatOutputParser::Syntax kPlainSyntax{false, {}, {}, {}, {}};
const ChatOutputParser::Syntax kGlmSyntax{true, {}, {}, "<tool_call>", "</tool_call>"};
const ChatOutputParser::Syntax kQwenSyntax{true, {}, {}, "<tool_call>", "</tool_call>"};
const ChatOutputParser::Syntax kDeepSeekSyntax{false, kDsCallsBegin, kDsCallsEnd, kDsCallBegin, kDsCallEnd};

const ChatOutputParser::Syntax* SyntaxOf(ChatFamily f) {
  switch (f) {
    case ChatFamily::kGlm: return &kGlmSyntax;
    case ChatFamily::kQwen: return &kQwenSyntax;
    case ChatFamily::kDeepSeekV3:
    case ChatFamily::kDeepSeekV31: return &kDeepSeekSyntax;
    default: return &kPlainSyntax;
  }
}

// Length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t PartialTagSuffix(std::string_view s, std::string_view tag) {
  if (tag.empty()) return 0;
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

std::string ParamType(const ojson& tools, const std::string& fn, const std::string& key) {
  if (!tools.is_array()) return "";
  for (const auto& t : tools) {
    const ojson& f = t.contains("function") ? t["function"] : t;
    if (!f.is_object() || f.value("name", "") != fn) continue;
    if (f.contains("parameters") && f["parameters"].is_object() && f["parameters"].contains("properties")) {
      const auto& props = f["parameters"]["properties"];
      if (props.is_object() && props.contains(key) && props[key].is_object()) {
        const auto& ty = props[key].value("type", ojson());
        if (ty.is_string()) return ty.get<std::string>();
      }
    }
  }
  return "";
}

bool ParseGlmCall(std::string_view body, const ojson& tools, ToolCall* tc) {
  size_t k = body.find("<arg_key>");
  tc->name = PyStrip(body.substr(0, k));
  if (tc->name.empty()) return false;
  while (k != std::string_view::npos) {
    const size_t ke = body.find("</arg_key>", k);
    if (ke == std::string_view::npos) break;
    const std::string key = PyStrip(body.substr(k + 9, ke - k - 9));
    const size_t vs = body.find("<arg_value>", ke);
    if (vs == std::string_view::npos) break;
    const size_t ve = body.find("</arg_value>", vs);
    if (ve == std::string_view::npos) break;
    const std::string value(body.substr(vs + 11, ve - vs - 11));
    ojson v;
    if (ParamType(tools, tc->name, key) != "string") {
      // Model output is as untrusted as a request: a value nested deeper than the bound
      // stays a string (dumping or copying it would recurse per level).
      auto parsed = ParseOrderedJson(value);
      v = parsed.ok() ? *std::move(parsed) : ojson(value);
    } else {
      v = value;
    }
    tc->arguments[key] = std::move(v);
    k = body.find("<arg_key>", ve);
  }
  return true;
}

bool ParseQwenCall(std::string_view body, ToolCall* tc) {
  auto j = ParseOrderedJson(PyStrip(body));
  if (!j.ok() || !j->is_object()) return false;
  auto name = j->find("name");
  if (name == j->end() || !name->is_string()) return false;
  tc->name = name->get<std::string>();
  auto args = j->find("arguments");
  if (args == j->end()) args = j->find("parameters");
  tc->arguments = args == j->end() ? ojson::object() : *args;
  return true;
}

bool ParseDeepSeekCall(std::string_view body, bool v31, ToolCall* tc) {
  const size_t sep = body.find(kDsSep);
  if (sep == std::string_view::npos) return false;
  std::string_view rest = body.substr(sep + kDsSep.size());
  if (v31) {
    tc->name = PyStrip(body.substr(0, sep));
    tc->arguments = PyStrip(rest);
  } else {
    tc->type = PyStrip(body.substr(0, sep));
    const size_t nl = rest.find('\n');
    tc->name = PyStrip(rest.substr(0, nl));
    std::string args = nl == std::string_view::npos ? std::string() : PyStrip(rest.substr(nl + 1));
    if (args.rfind("```json", 0) == 0) args = PyStrip(std::string_view(args).substr(7));
    if (args.size() >= 3 && args.compare(args.size() - 3, 3, "```") == 0) args = PyStrip(std::string_view(args).substr(0, args.size() - 3));
    tc->arguments = args;
  }
  return !tc->name.empty();
}

std::string Joined(const std::vector<std::string>& parts) {
  std::string s;
  for (const auto& p : parts) {
    s += p;
    s.push_back('\0');
  }
  return s;
}

}  // namespace

const char* ChatFamilyName(ChatFamily f) {
  switch (f) {
    case ChatFamily::kGlm: return "glm";
    case ChatFamily::kDeepSeekV3: return "deepseek_v3";
    case ChatFamily::kDeepSeekV31: return "deepseek_v3.1";
    case ChatFamily::kQwen: return "qwen";
    default: return "plain";
  }
}

ChatFamily DetectChatFamily(const std::vector<std::string>& literals, std::string_view model_type) {
  const std::string t = Joined(literals);
  auto has = [&](std::string_view x) { return t.find(x) != std::string::npos; };
  if (has("<arg_key>")) return ChatFamily::kGlm;
  if (has(kDsCallBegin)) return has("```json") ? ChatFamily::kDeepSeekV3 : ChatFamily::kDeepSeekV31;
  if (has("<tool_call>")) return ChatFamily::kQwen;
  if (model_type.rfind("glm", 0) == 0) return ChatFamily::kGlm;
  if (model_type == "deepseek_v3") return ChatFamily::kDeepSeekV3;
  if (model_type.rfind("qwen", 0) == 0) return ChatFamily::kQwen;
  return ChatFamily::kPlain;
}

bool PromptOpensReasoning(std::string_view prompt) {
  const std::string_view s = std::string_view(prompt).substr(0, prompt.find_last_not_of(" \t\r\n") + 1);
  return s.size() >= kThink.size() && s.substr(s.size() - kThink.size()) == kThink;
}

ChatOutputParser::ChatOutputParser(ChatFamily family, bool start_in_reasoning, ojson tools)
    : family_(family),
      syntax_(SyntaxOf(family)),
      state_(start_in_reasoning ? State::kReasoning : State::kContent),
      tools_(std::move(tools)) {}

bool ChatOutputParser::ParseCall(std::string_view body, ToolCall* out) const {
  switch (family_) {
    case ChatFamily::kGlm: return ParseGlmCall(body, tools_, out);
    case ChatFamily::kQwen: return ParseQwenCall(body, out);
    case ChatFamily::kDeepSeekV3: return ParseDeepSeekCall(body, false, out);
    case ChatFamily::kDeepSeekV31: return ParseDeepSeekCall(body, true, out);
    default: return false;
  }
}

void ChatOutputParser::Drain(OutputDelta* d, bool final) {
  const Syntax& sx = *syntax_;
  for (;;) {
    if (at_start_) {
      // The model may open the think block itself.
      if (!final && buf_.size() < kThink.size() && kThink.substr(0, buf_.size()) == buf_) return;
      if (buf_.compare(0, kThink.size(), kThink) == 0) {
        buf_.erase(0, kThink.size());
        state_ = State::kReasoning;
      }
      at_start_ = false;
    }
    if (state_ == State::kReasoning) {
      const size_t p = buf_.find(kEndThink);
      if (p != std::string::npos) {
        d->reasoning += buf_.substr(0, p);
        buf_.erase(0, p + kEndThink.size());
        state_ = State::kContent;
        continue;
      }
      const size_t hold = final ? 0 : PartialTagSuffix(buf_, kEndThink);
      d->reasoning += buf_.substr(0, buf_.size() - hold);
      buf_.erase(0, buf_.size() - hold);
      return;
    }
    if (state_ == State::kContent || state_ == State::kSection) {
      const bool section = state_ == State::kSection;
      // The tags that end this state, earliest first.
      std::string_view tags[3];
      int n = 0;
      if (!sx.call_open.empty()) tags[n++] = sx.call_open;
      if (!section && !sx.section_open.empty()) tags[n++] = sx.section_open;
      if (section) tags[n++] = sx.section_close;
      if (!section && sx.think_anywhere) tags[n++] = kThink;
      size_t best = std::string::npos;
      std::string_view hit;
      for (int i = 0; i < n; ++i) {
        const size_t p = buf_.find(tags[i]);
        if (p < best) {
          best = p;
          hit = tags[i];
        }
      }
      if (best != std::string::npos) {
        if (!section) d->content += buf_.substr(0, best);  // text between calls in a section is dropped
        buf_.erase(0, best + hit.size());
        if (hit == sx.call_open) {
          after_call_ = state_;
          state_ = State::kCall;
        } else if (hit == kThink) {
          state_ = State::kReasoning;
        } else {
          state_ = section ? State::kContent : State::kSection;
        }
        continue;
      }
      size_t hold = 0;
      if (!final) {
        for (int i = 0; i < n; ++i) hold = std::max(hold, PartialTagSuffix(buf_, tags[i]));
      }
      if (!section) d->content += buf_.substr(0, buf_.size() - hold);
      buf_.erase(0, buf_.size() - hold);
      return;
    }
    // kCall: a call is held until its closing tag. Search only what arrived since the last
    // look (less a tag's length): rescanning the whole held call on every token was quadratic
    // in its length (found by the output_parser fuzzer).
    const size_t p = buf_.find(sx.call_close, call_scanned_);
    if (p == std::string::npos) {
      call_scanned_ = buf_.size() >= sx.call_close.size() ? buf_.size() - sx.call_close.size() + 1 : 0;
      if (final) {
        d->content += std::string(sx.call_open) + buf_;
        buf_.clear();
        call_scanned_ = 0;
        state_ = State::kContent;
      }
      return;
    }
    call_scanned_ = 0;
    ToolCall tc;
    const std::string_view body = std::string_view(buf_).substr(0, p);
    if (ParseCall(body, &tc)) {
      d->tool_calls.push_back(std::move(tc));
    } else {
      d->content += std::string(sx.call_open) + std::string(body) + std::string(sx.call_close);
    }
    buf_.erase(0, p + sx.call_close.size());
    state_ = after_call_;
  }
}

OutputDelta ChatOutputParser::Push(std::string_view text) {
  buf_.append(text);
  OutputDelta d;
  Drain(&d, false);
  return d;
}

OutputDelta ChatOutputParser::Finish() {
  OutputDelta d;
  Drain(&d, true);
  return d;
}

OutputDelta ChatOutputParser::Parse(ChatFamily family, std::string_view text, bool start_in_reasoning,
                                    const ojson& tools) {
  ChatOutputParser p(family, start_in_reasoning, tools);
  OutputDelta a = p.Push(text), b = p.Finish();
  OutputDelta m;
  m.reasoning = PyStrip(a.reasoning + b.reasoning);
  m.content = PyStrip(a.content + b.content);
  m.tool_calls = std::move(a.tool_calls);
  m.tool_calls.insert(m.tool_calls.end(), b.tool_calls.begin(), b.tool_calls.end());
  return m;
}

}  // namespace moe::text
