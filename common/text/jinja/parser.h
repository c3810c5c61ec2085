// Template source -> syntax tree, with Jinja2's lexer rules as transformers configures them:
// trim_blocks and lstrip_blocks on, `-`/`+` whitespace control on every tag, newlines
// normalised to "\n", one trailing newline dropped (keep_trailing_newline=False), brackets
// balanced before a tag may end, and Jinja2's grammar and operator precedence (filters and
// tests bind tighter than arithmetic; `a if b` without else).
// Unknown tags, filters and tests are errors at parse time (Jinja2: at compile time).
// Errors: TemplateError (kind "TemplateSyntaxError" or "TemplateAssertionError") with the
// line; Parse never returns a partial tree.
// Thread safety: pure function.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/text/jinja/ast.h"

namespace moe::text::jinja {

std::unique_ptr<TemplateAst> Parse(std::string_view source);

// Every name the template reads (a superset of its free variables): lets callers refuse
// template kwargs the template never looks at.
std::set<std::string> ReferencedNames(const TemplateAst& ast);

// The template's literal strings: its text between tags and every string constant (what
// transformers' _get_template_literal_text collects to find the template's control tokens).
std::vector<std::string> Literals(const TemplateAst& ast);

}  // namespace moe::text::jinja
