#include "common/text/chat_parser.h"

#include <algorithm>

#include "common/base/json.h"
#include "common/text/utf8.h"

namespace moe::text {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kThink = "<think>";
constexpr std::string_view kEndThink = "</think>";
constexpr std::string_view kCall = "<tool_call>";
constexpr std::string_view kEndCall = "</tool_call>";

// Length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t PartialTagSuffix(std::string_view s, std::string_view tag) {
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

}  // namespace

GlmOutputParser::GlmOutputParser(bool start_in_reasoning, ojson tools)
    : state_(start_in_reasoning ? State::kReasoning : State::kContent), tools_(std::move(tools)) {}

ToolCall GlmOutputParser::ParseCall(std::string_view body) const {
  ToolCall tc;
  size_t k = body.find("<arg_key>");
  tc.name = PyStrip(body.substr(0, k));
  while (k != std::string_view::npos) {
    const size_t ke = body.find("</arg_key>", k);
    if (ke == std::string_view::npos) break;
    const std::string key = PyStrip(body.substr(k + 9, ke - k - 9));
    const size_t vs = body.find("<arg_value>", ke);
    if (vs == std::string_view::npos) break;
    const size_t ve = body.find("</arg_value>", vs);
    if (ve == std::string_view::npos) break;
    const std::string value(body.substr(vs + 11, ve - vs - 11));
    const std::string type = ParamType(tools_, tc.name, key);
    ojson v;
    if (type != "string") {
      // Model output is as untrusted as a request: a value nested deeper than the bound
      // stays a string (dumping or copying it would recurse per level).
      auto parsed = ParseOrderedJson(value);
      v = parsed.ok() ? *std::move(parsed) : ojson(value);
    } else {
      v = value;
    }
    tc.arguments[key] = std::move(v);
    k = body.find("<arg_key>", ve);
  }
  return tc;
}

void GlmOutputParser::Drain(OutputDelta* d, bool final) {
  for (;;) {
    if (at_start_ && state_ == State::kReasoning) {
      // The model may open the block itself.
      if (!final && buf_.size() < kThink.size() && kThink.substr(0, buf_.size()) == buf_) return;
      if (buf_.compare(0, kThink.size(), kThink) == 0) buf_.erase(0, kThink.size());
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
    if (state_ == State::kContent) {
      const size_t pc = buf_.find(kCall), pt = buf_.find(kThink);
      const size_t p = std::min(pc, pt);
      if (p != std::string::npos) {
        d->content += buf_.substr(0, p);
        if (p == pc) {
          buf_.erase(0, p + kCall.size());
          state_ = State::kToolCall;
        } else {
          buf_.erase(0, p + kThink.size());
          state_ = State::kReasoning;
        }
        continue;
      }
      const size_t hold = final ? 0 : std::max(PartialTagSuffix(buf_, kCall), PartialTagSuffix(buf_, kThink));
      d->content += buf_.substr(0, buf_.size() - hold);
      buf_.erase(0, buf_.size() - hold);
      return;
    }
    // kToolCall
    const size_t p = buf_.find(kEndCall);
    if (p == std::string::npos) {
      if (final) {
        d->content += std::string(kCall) + buf_;
        buf_.clear();
        state_ = State::kContent;
      }
      return;
    }
    d->tool_calls.push_back(ParseCall(std::string_view(buf_).substr(0, p)));
    buf_.erase(0, p + kEndCall.size());
    state_ = State::kContent;
  }
}

OutputDelta GlmOutputParser::Push(std::string_view text) {
  buf_.append(text);
  OutputDelta d;
  Drain(&d, false);
  return d;
}

OutputDelta GlmOutputParser::Finish() {
  OutputDelta d;
  Drain(&d, true);
  return d;
}

ChatMessage GlmOutputParser::Parse(std::string_view text, bool start_in_reasoning, const ojson& tools) {
  GlmOutputParser p(start_in_reasoning, tools);
  OutputDelta a = p.Push(text), b = p.Finish();
  ChatMessage m;
  m.role = "assistant";
  const std::string reasoning = PyStrip(a.reasoning + b.reasoning);
  if (!reasoning.empty()) m.reasoning_content = reasoning;
  m.content = PyStrip(a.content + b.content);
  m.tool_calls = std::move(a.tool_calls);
  m.tool_calls.insert(m.tool_calls.end(), b.tool_calls.begin(), b.tool_calls.end());
  m.has_tool_calls = !m.tool_calls.empty();
  return m;
}

}  // namespace moe::text
