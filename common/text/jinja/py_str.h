// Python's str methods on tainted strings, indexed by code point as Python indexes, with the
// taint of every byte that stays in place kept exactly (see tstring.h for the rule).
// Case mapping uses ICU's full mappings (Python's str.upper/lower); title and capitalize map
// the first letter with the simple titlecase mapping.
// Errors: TemplateError (ValueError/TypeError) as Python raises them.
// Thread safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/text/jinja/tstring.h"
#include "common/text/jinja/value.h"

namespace moe::text::jinja::py {

enum class StripSide { kBoth, kLeft, kRight };
// chars == nullopt: Python whitespace.
TString Strip(const TString& s, const std::optional<std::string>& chars, StripSide side);
// sep == nullopt: runs of whitespace, empty pieces dropped. maxsplit < 0: no limit.
std::vector<TString> Split(const TString& s, const std::optional<std::string>& sep, int64_t maxsplit, bool from_right);
std::vector<TString> SplitLines(const TString& s, bool keepends);
TString Replace(const TString& s, const TString& old, const TString& repl, int64_t count);
// Code-point index of the first/last occurrence in [start, end) (code points), or -1.
int64_t Find(std::string_view s, std::string_view sub, int64_t start, int64_t end, bool from_right);
int64_t Count(std::string_view s, std::string_view sub);

TString Upper(const TString& s);
TString Lower(const TString& s);
TString SwapCase(const TString& s);
TString Title(const TString& s);       // str.title()
TString Capitalize(const TString& s);  // str.capitalize()
// Jinja2's `title` filter: each word (split at - whitespace ( { [ <) -> first upper, rest lower.
TString JinjaTitle(const TString& s);

bool IsDigit(std::string_view s);
bool IsAlpha(std::string_view s);
bool IsAlnum(std::string_view s);
bool IsSpace(std::string_view s);
bool IsLower(std::string_view s);
bool IsUpper(std::string_view s);

// str.center/ljust/rjust/zfill (width in code points).
TString Pad(const TString& s, int64_t width, const std::string& fill, char how /* c l r z */);

// `fmt % args` (printf-style: %s %r %d %i %f %e %g %x %o %c %%, flags, width, precision,
// and %(name)s with a mapping).
TString Percent(const TString& fmt, const Value& args);
// str.format(*pos, **kw): {} {0} {name} {0.attr}/{0[key]} not supported (an error), format
// specs of the common kinds (fill, align, width, precision, d/f/s).
TString Format(const TString& fmt, const std::vector<Value>& pos, const std::vector<std::pair<std::string, Value>>& kw);

}  // namespace moe::text::jinja::py
