// A chat template compiled once and rendered many times, as Jinja2 renders it in the
// environment transformers builds for apply_chat_template (ImmutableSandboxedEnvironment,
// trim_blocks, lstrip_blocks, loopcontrols, the {% generation %} tag, its tojson,
// raise_exception, strftime_now, dict and namespace). See parser.h, interpreter.h and
// builtins.h for the parts.
//
//   MOE_ASSIGN_OR_RETURN(auto t, jinja::Template::Parse(source, "model/chat_template.jinja"));
//   jinja::Dict vars;  vars.Set(jinja::Value::Str("messages"), ...);
//   MOE_ASSIGN_OR_RETURN(jinja::TString out, t.Render(vars));
//
// Errors (InvalidArgument): "<origin> line N: <message>" -- the template's own message for
// raise_exception, "<Python exception>: <message>" otherwise (syntax errors at Parse,
// undefined attributes, type errors, the sandbox's refusals at Render).
// Thread safety: a Template is immutable; Render may run on many threads at once.
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/text/jinja/interpreter.h"
#include "common/text/jinja/value.h"

namespace moe::text::jinja {

struct RenderOptions {
  // Formats "now" for strftime_now (default: the local time, as datetime.now() does).
  std::function<std::string(const std::string&)> strftime;
  RenderLimits limits;
};

// strftime(fmt) of the local time now (C locale, as CPython's time.strftime).
std::string StrftimeNow(const std::string& fmt);

class Template {
 public:
  static absl::StatusOr<Template> Parse(std::string_view source, std::string origin);

  absl::StatusOr<TString> Render(const Dict& vars, const RenderOptions& opt = {}) const;

  const std::string& origin() const { return origin_; }
  // Names the template reads (kwargs it can act on).
  const std::set<std::string>& referenced_names() const { return names_; }
  // Text between tags and string constants (its control tokens come from these).
  const std::vector<std::string>& literals() const { return literals_; }

 private:
  std::shared_ptr<const TemplateAst> ast_;
  std::string origin_;
  std::set<std::string> names_;
  std::vector<std::string> literals_;
};

}  // namespace moe::text::jinja
