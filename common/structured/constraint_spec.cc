#include "common/structured/constraint_spec.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/base/json.h"
#include "common/base/status.h"
#include "common/structured/grammar_build.h"

namespace moe::structured {
namespace {

using ojson = nlohmann::ordered_json;
using Kind = ConstraintSpec::Kind;

struct KindName {
  Kind kind;
  const char* name;
};
constexpr KindName kKinds[] = {{Kind::kNone, "none"},         {Kind::kJsonSchema, "json_schema"},
                               {Kind::kJsonObject, "json_object"}, {Kind::kRegex, "regex"},
                               {Kind::kGrammar, "grammar"},   {Kind::kLark, "lark"},
                               {Kind::kChoice, "choice"},     {Kind::kToolCalls, "tool_calls"}};

ojson Excludes(const ConstraintSpec& s, const std::string& allowed = "") {
  ojson e = ojson::array();
  for (const auto& x : s.text_excludes) {
    if (x != allowed) e.push_back(x);
  }
  return e;
}

// `excludes`: keep the chat markers out of strings (tool-call arguments, which the output
// parser cuts at markers). A JSON body needs none: the parser passes a constrained body
// through as content.
absl::StatusOr<ojson> JsonElement(const ConstraintSpec& s, const ojson& schema, bool strict, const std::string& style,
                                  const std::string& where, bool excludes) {
  auto prepared = PrepareJsonSchema(schema, strict, s.limits);
  if (!prepared.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where, prepared.status().message()));
  }
  ojson el = {{"type", "json_schema"}, {"json_schema", *prepared}, {"style", style}};
  el["max_whitespace_cnt"] = s.max_whitespace;
  if (excludes) el["excludes"] = Excludes(s);
  return el;
}

absl::StatusOr<ojson> ToolTag(const ConstraintSpec& s, const ToolFunction& f) {
  MOE_ASSIGN_OR_RETURN(ojson content,
                       JsonElement(s, f.parameters, f.strict, s.tool_syntax.style,
                                   absl::StrCat("tools: function '", f.name, "' parameters: "), /*excludes=*/true));
  return ojson{{"type", "tag"},
               {"begin", s.tool_syntax.begin + f.name + s.tool_syntax.after_name},
               {"content", content},
               {"end", s.tool_syntax.end}};
}

absl::StatusOr<ojson> Body(const ConstraintSpec& s) {
  switch (s.kind) {
    case Kind::kJsonSchema: {
      auto schema = ParseOrderedJson(s.source);
      if (!schema.ok()) return absl::InvalidArgumentError(absl::StrCat("schema: ", schema.status().message()));
      return JsonElement(s, *schema, s.strict, "json", "", /*excludes=*/false);
    }
    case Kind::kJsonObject:
      return JsonElement(s, ojson{{"type", "object"}}, /*strict=*/false, "json", "", /*excludes=*/false);
    case Kind::kRegex:
      if (LargestRepeatCount(s.source) > s.limits.max_repeat) {
        return absl::InvalidArgumentError(absl::StrCat("regex repeats {", LargestRepeatCount(s.source),
                                                       "} times, above this server's bound of ", s.limits.max_repeat));
      }
      return ojson{{"type", "regex"}, {"pattern", s.source}};
    case Kind::kGrammar:
      if (LargestRepeatCount(s.source) > s.limits.max_repeat) {
        return absl::InvalidArgumentError(absl::StrCat("grammar repeats {", LargestRepeatCount(s.source),
                                                       "} times, above this server's bound of ", s.limits.max_repeat));
      }
      return ojson{{"type", "grammar"}, {"grammar", s.source}};
    case Kind::kChoice: {
      auto choices = ParseOrderedJson(s.source);
      if (!choices.ok() || !choices->is_array() || choices->empty()) {
        return absl::InvalidArgumentError("choice: must be a non-empty array of strings");
      }
      ojson els = ojson::array();
      for (const auto& c : *choices) {
        if (!c.is_string()) return absl::InvalidArgumentError("choice: must be a non-empty array of strings");
        els.push_back(ojson{{"type", "const_string"}, {"value", c}});
      }
      return ojson{{"type", "or"}, {"elements", els}};
    }
    case Kind::kToolCalls: {
      if (s.tools.empty()) return absl::InvalidArgumentError("tool calls: no function to call");
      ojson tags = ojson::array();
      for (const auto& f : s.tools) {
        MOE_ASSIGN_OR_RETURN(ojson t, ToolTag(s, f));
        tags.push_back(std::move(t));
        if (s.named_tool) break;
      }
      if (s.named_tool) return tags[0];
      return ojson{{"type", "triggered_tags"},
                   {"triggers", ojson::array({s.tool_syntax.start()})},
                   {"tags", tags},
                   {"at_least_one", s.tools_required},
                   {"stop_after_first", s.single_call},
                   {"excludes", Excludes(s, s.tool_syntax.start())}};
    }
    case Kind::kNone:
    case Kind::kLark:
      break;
  }
  return absl::InternalError("no structural-tag body for this kind");
}

ojson ReasoningPrefix(const ConstraintSpec& s) {
  return ojson{{"type", "tag"},
               {"begin", ""},
               {"content", ojson{{"type", "any_text"}, {"excludes", Excludes(s)}}},
               {"end", s.reasoning_end}};
}

template <class F>
absl::StatusOr<xgrammar::Grammar> Guard(F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(e.what());
  }
}

absl::StatusOr<xgrammar::Grammar> FromTag(const std::string& tag) {
  return Guard([&]() -> absl::StatusOr<xgrammar::Grammar> {
    auto g = xgrammar::Grammar::FromStructuralTag(tag);
    if (auto* e = std::get_if<xgrammar::StructuralTagError>(&g)) {
      return absl::InvalidArgumentError(std::visit([](const auto& x) { return std::string(x.what()); }, *e));
    }
    return std::get<xgrammar::Grammar>(std::move(g));
  });
}

}  // namespace

const char* ConstraintKindName(Kind k) {
  for (const auto& kn : kKinds) {
    if (kn.kind == k) return kn.name;
  }
  return "?";
}

std::string ToJson(const ConstraintSpec& s) {
  ojson tools = ojson::array();
  for (const auto& f : s.tools) tools.push_back(ojson{{"name", f.name}, {"parameters", f.parameters}, {"strict", f.strict}});
  ojson j{{"kind", ConstraintKindName(s.kind)},
          {"source", s.source},
          {"strict", s.strict},
          {"max_whitespace", s.max_whitespace},
          {"tools", tools},
          {"tool_syntax",
           {{"begin", s.tool_syntax.begin},
            {"after_name", s.tool_syntax.after_name},
            {"style", s.tool_syntax.style},
            {"end", s.tool_syntax.end},
            {"trigger", s.tool_syntax.trigger}}},
          {"tools_required", s.tools_required},
          {"named_tool", s.named_tool},
          {"single_call", s.single_call},
          {"reasoning_end", s.reasoning_end},
          {"text_excludes", s.text_excludes},
          {"max_repeat", s.limits.max_repeat}};
  return DumpJson(j);
}

absl::StatusOr<ConstraintSpec> ConstraintSpecFromJson(const std::string& text) {
  auto parsed = ParseOrderedJson(text);
  if (!parsed.ok()) return absl::InvalidArgumentError(absl::StrCat("constraint: ", parsed.status().message()));
  const ojson& j = *parsed;
  ConstraintSpec s;
  try {
    const std::string kind = j.at("kind").get<std::string>();
    bool found = false;
    for (const auto& kn : kKinds) {
      if (kind == kn.name) {
        s.kind = kn.kind;
        found = true;
      }
    }
    if (!found) return absl::InvalidArgumentError(absl::StrCat("constraint: unknown kind '", kind, "'"));
    s.source = j.at("source").get<std::string>();
    s.strict = j.at("strict").get<bool>();
    s.max_whitespace = j.at("max_whitespace").get<int>();
    for (const auto& f : j.at("tools")) {
      s.tools.push_back({f.at("name").get<std::string>(), f.at("parameters"), f.at("strict").get<bool>()});
    }
    const ojson& ts = j.at("tool_syntax");
    s.tool_syntax = {ts.at("begin").get<std::string>(), ts.at("after_name").get<std::string>(),
                     ts.at("style").get<std::string>(), ts.at("end").get<std::string>(),
                     ts.at("trigger").get<std::string>()};
    s.tools_required = j.at("tools_required").get<bool>();
    s.named_tool = j.at("named_tool").get<bool>();
    s.single_call = j.at("single_call").get<bool>();
    s.reasoning_end = j.at("reasoning_end").get<std::string>();
    s.text_excludes = j.at("text_excludes").get<std::vector<std::string>>();
    s.limits.max_repeat = j.at("max_repeat").get<int64_t>();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("constraint: ", e.what()));
  }
  if (s.max_whitespace < 0) return absl::InvalidArgumentError("constraint: max_whitespace < 0");
  return s;
}

absl::StatusOr<std::string> BuildStructuralTag(const ConstraintSpec& s) {
  if (!s.active()) return absl::InvalidArgumentError("constraint: kind none has no grammar");
  if (s.kind == Kind::kLark) {
    if (s.reasoning_end.empty()) return std::string();
    return DumpJson(ojson{{"type", "structural_tag"}, {"format", ReasoningPrefix(s)}});
  }
  MOE_ASSIGN_OR_RETURN(ojson body, Body(s));
  ojson format = s.reasoning_end.empty()
                     ? body
                     : ojson{{"type", "sequence"}, {"elements", ojson::array({ReasoningPrefix(s), body})}};
  return DumpJson(ojson{{"type", "structural_tag"}, {"format", format}});
}

absl::StatusOr<xgrammar::Grammar> BuildGrammar(const ConstraintSpec& s) {
  MOE_ASSIGN_OR_RETURN(std::string tag, BuildStructuralTag(s));
  if (s.kind != Kind::kLark) return FromTag(tag);
  if (LargestRepeatCount(s.source) > s.limits.max_repeat) {
    return absl::InvalidArgumentError(absl::StrCat("grammar repeats {", LargestRepeatCount(s.source),
                                                   "} times, above this server's bound of ", s.limits.max_repeat));
  }
  MOE_ASSIGN_OR_RETURN(xgrammar::Grammar body,
                       Guard([&]() -> absl::StatusOr<xgrammar::Grammar> { return xgrammar::Grammar::FromLark(s.source); }));
  if (tag.empty()) return body;
  MOE_ASSIGN_OR_RETURN(xgrammar::Grammar prefix, FromTag(tag));
  return Guard([&]() -> absl::StatusOr<xgrammar::Grammar> { return xgrammar::Grammar::Concat({prefix, body}); });
}

absl::Status ValidateConstraint(const ConstraintSpec& spec) {
  auto g = BuildGrammar(spec);
  return g.ok() ? absl::OkStatus() : g.status();
}

}  // namespace moe::structured
