// Syntax tree of a parsed template: Jinja2's node set, as far as chat templates use it.
// One node struct per family (expressions, statements) with the fields each kind needs;
// `line` is the template line (1-based) that errors name.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/text/jinja/value.h"

namespace moe::text::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind : uint8_t {
  kConst,      // value
  kName,       // name
  kGetattr,    // a.name
  kGetitem,    // a[b]
  kSlice,      // a:b:c inside [] (a, b, c may be null)
  kCall,       // a(args, kwargs, *dyn_args, **dyn_kwargs)
  kFilter,     // a | name(args, kwargs); a is null inside {% filter %}
  kTest,       // a is name(args, kwargs)
  kNeg,        // -a
  kPos,        // +a
  kNot,        // not a
  kAnd,        // a and b
  kOr,         // a or b
  kBinary,     // a op b (op: + - * / // % **)
  kConcat,     // args joined with ~
  kCompare,    // a (op b)+, ops in `ops`
  kCond,       // b if a else c (c may be null)
  kList,       // [args]
  kTuple,      // (args)
  kDict,       // {keys[i]: args[i]}
};

struct Expr {
  ExprKind kind = ExprKind::kConst;
  int line = 0;
  Value value;                                       // kConst (immortal: shared by renders)
  std::string name;                                  // kName, kGetattr, kFilter, kTest, kBinary (op)
  const std::string* sym = nullptr;                  // kName: the interned name
  ExprPtr a, b, c;                                   // operands
  std::vector<ExprPtr> args;                         // call/filter/test args, list/tuple items, dict values
  std::vector<ExprPtr> keys;                         // kDict keys
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr dyn_args, dyn_kwargs;                      // *args, **kwargs in calls
  std::vector<std::string> ops;                      // kCompare: eq ne lt lteq gt gteq in notin
  const void* builtin = nullptr;                     // kFilter/kTest: resolved function
};

enum class StmtKind : uint8_t {
  kData,       // text (with no taint)
  kOutput,     // {{ expr }}
  kIf,         // tests[i] -> bodies[i]; else_body
  kFor,        // for target in iter [if filter] body [else else_body]
  kSet,        // set target = expr
  kSetBlock,   // set target [| filters] body endset
  kMacro,      // macro name(params=defaults) body
  kCallBlock,  // {% generation %} body (transformers' AssistantTracker renders it as is)
  kFilterBlock,// filter chain (expr with null innermost input) over body
  kWith,       // with targets = values: body
  kBreak,
  kContinue,
};

// Assignment target: a name, ns.attr, or a tuple of names.
struct Target {
  std::vector<std::string> names;  // one name, or several for tuple unpacking
  std::vector<const std::string*> syms;  // the names, interned
  std::string attr;                // non-empty: names[0].attr
  bool tuple = false;
};

struct Stmt {
  StmtKind kind = StmtKind::kData;
  int line = 0;
  std::string data;                 // kData
  ExprPtr expr;                     // kOutput, kSet, kFor (iter), kFilterBlock/kSetBlock (filter chain)
  ExprPtr filter;                   // kFor: `if` filter
  std::vector<ExprPtr> tests;       // kIf
  std::vector<Body> bodies;         // kIf
  Body body;                        // kFor, kSetBlock, kMacro, kCallBlock, kFilterBlock, kWith
  Body else_body;                   // kIf, kFor
  Target target;                    // kFor, kSet, kSetBlock
  std::string name;                 // kMacro
  const std::string* name_sym = nullptr;
  std::vector<std::string> params;  // kMacro
  std::vector<const std::string*> param_syms;
  std::vector<ExprPtr> defaults;    // kMacro: defaults for the last params (aligned right)
  bool uses_varargs = false;        // kMacro: body reads `varargs` / `kwargs`
  bool uses_kwargs = false;
  std::vector<Target> with_targets; // kWith
  std::vector<ExprPtr> with_values;
};

// Variable names, interned at parse time: scopes compare them by pointer.
class Symbols {
 public:
  const std::string* Intern(std::string_view name) {
    auto it = index_.find(absl::string_view(name.data(), name.size()));
    if (it != index_.end()) return it->second;
    names_.emplace_back(name);
    index_.emplace(names_.back(), &names_.back());
    return &names_.back();
  }
  // nullptr: the template never names it.
  const std::string* Find(std::string_view name) const {
    auto it = index_.find(absl::string_view(name.data(), name.size()));
    return it == index_.end() ? nullptr : it->second;
  }

 private:
  std::deque<std::string> names_;
  absl::flat_hash_map<std::string, const std::string*> index_;
};

struct TemplateAst {
  std::vector<std::unique_ptr<Object>> immortals;  // the constants' objects (destroyed after body)
  Symbols symbols;
  const std::string* loop_sym = nullptr;
  const std::string* varargs_sym = nullptr;
  const std::string* kwargs_sym = nullptr;
  Body body;
};

}  // namespace moe::text::jinja
