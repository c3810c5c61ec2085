// Syntax tree of a parsed template: Jinja2's node set, as far as chat templates use it.
// One node struct per family (expressions, statements) with the fields each kind needs;
// `line` is the template line (1-based) that errors name.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

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
  Value value;                                       // kConst
  std::string name;                                  // kName, kGetattr, kFilter, kTest, kBinary (op)
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
  std::vector<std::string> params;  // kMacro
  std::vector<ExprPtr> defaults;    // kMacro: defaults for the last params (aligned right)
  bool uses_varargs = false;        // kMacro: body reads `varargs` / `kwargs`
  bool uses_kwargs = false;
  std::vector<Target> with_targets; // kWith
  std::vector<ExprPtr> with_values;
};

struct TemplateAst {
  Body body;
};

}  // namespace moe::text::jinja
