// Jinja2's filters and tests, Python's str/dict/list methods, and the globals transformers
// gives chat templates (range, namespace, dict, raise_exception, strftime_now, joiner), with
// the semantics of Jinja2 3.1 in an ImmutableSandboxedEnvironment: methods that mutate a
// list or dict are refused with SecurityError, as there.
// Thread safety: the tables are immutable.
#pragma once

#include <string_view>

#include "common/text/jinja/value.h"

namespace moe::text::jinja {

class Interpreter;
using FilterFn = Value (*)(Interpreter& in, const Value& input, CallArgs& args);
using TestFn = bool (*)(Interpreter& in, const Value& input, CallArgs& args);

// nullptr when there is no such filter/test (a parse-time error, as in Jinja2).
const FilterFn* FindFilter(std::string_view name);
const TestFn* FindTest(std::string_view name);

// `obj.name` when `name` is a Python method of obj's type: a bound callable, or an undefined
// value carrying the sandbox's SecurityError for mutators. False when obj has no such method.
bool FindMethod(const Value& obj, std::string_view name, Value* out);
// obj.name(args) without building the bound callable (the common case, and the hot one):
// false when obj has no such method; mutators raise the sandbox's SecurityError.
bool CallMethod(Interpreter& in, const Value& obj, std::string_view name, CallArgs& args, Value* out);

// The global `name` (range, namespace, dict, raise_exception, strftime_now, joiner, cycler
// is not provided); false when there is none.
bool FindGlobal(std::string_view name, Value* out);

}  // namespace moe::text::jinja
