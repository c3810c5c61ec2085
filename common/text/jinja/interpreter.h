// Executes a parsed template: Jinja2's scoping (a for-loop body is a fresh scope every
// iteration; `if` is no scope; a macro sees the scope it was defined in, live; `set` binds in
// the innermost scope; namespaces are shared by reference), its Undefined, the sandbox's
// attribute rules (`obj.name` is a Python attribute first -- so `d.items` is the method --
// then a key; `obj[key]` is the other way round) and Python's operators.
// Bounds (RenderLimits): macro recursion depth, evaluator recursion depth, output size, steps
// and the work budget (budget.h) are limited, so no template (the model's, a fine-tune's,
// one given with --chat-template) can exhaust the stack, the memory or the CPU of a server,
// whatever data it is given. Each error names the limit it hit.
// Errors: TemplateError with the template line of the innermost statement or expression.
// Thread safety: one Interpreter per render.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/text/jinja/ast.h"
#include "common/text/jinja/value.h"

namespace moe::text::jinja {

// Every corpus template renders every corpus conversation far inside these (the golden test
// renders with them); tests/text/jinja_bounds_test.cc hits each one.
struct RenderLimits {
  size_t max_output_bytes = 64u << 20;
  int max_call_depth = 256;         // nested macro calls
  // Nested statements, expressions and macro calls being evaluated at once: what bounds the
  // native stack (400-800 bytes a level in Release: ~1.6 MB at most; the parser bounds one
  // template's nesting, but macro recursion multiplies it).
  int max_eval_depth = 2000;
  // Native stack the render may use below where it starts (and never past its thread's stack
  // less 1 MiB): the backstop where frames are larger than in Release (sanitizer builds, where
  // 2000 levels of Eval need more than 8 MB). Release reaches max_eval_depth first.
  size_t max_stack_bytes = 4u << 20;
  uint64_t max_steps = 20'000'000;  // a 200-message chat with tools takes ~10^5
  // Bytes of text and lists built, copied or scanned (budget.h); at most 4 GiB (TString's
  // offsets are 32-bit).
  uint64_t max_work_bytes = 1ull << 30;
};

class Interpreter {
 public:
  // `strftime` formats the render's current time (strftime_now).
  Interpreter(const TemplateAst& ast, RenderLimits limits, std::function<std::string(const std::string&)> strftime);

  // Renders with the given top-level variables.
  TString Render(const Dict& vars);

  // For builtins.
  Value Call(const Value& fn, CallArgs& args);
  Value GetAttr(const Value& obj, std::string_view name);
  Value GetItem(const Value& obj, const Value& key);
  Value ApplyFilter(std::string_view name, const Value& input, CallArgs& args);
  bool ApplyTest(std::string_view name, const Value& input, CallArgs& args);
  std::string Strftime(const std::string& fmt) const { return strftime_(fmt); }

  // Variables of one scope, by interned name (ast.h Symbols): a handful each, so a short
  // vector compared by pointer beats hashing.
  struct Scope {
    std::vector<std::pair<const std::string*, Value>> vars;
    std::shared_ptr<Scope> parent;
    Value* Find(const std::string* sym) {
      for (auto& kv : vars) {
        if (kv.first == sym) return &kv.second;
      }
      return nullptr;
    }
    void Set(const std::string* sym, Value v) {
      if (Value* p = Find(sym)) {
        *p = std::move(v);
      } else {
        vars.emplace_back(sym, std::move(v));
      }
    }
  };
  using ScopePtr = std::shared_ptr<Scope>;

  // Runs a macro: binds `args` in a scope under `defined_in` and returns its output.
  Value RunMacro(const Stmt& macro, const ScopePtr& defined_in, CallArgs& args);
  // Namespaces made during this render; emptied when it ends (a namespace can hold itself).
  void Track(const Value& ns) { namespaces_.push_back(ns); }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow Exec(const Body& body, const ScopePtr& scope, TString* out);
  Flow ExecStmt(const Stmt& s, const ScopePtr& scope, TString* out);
  void ExecFor(const Stmt& s, const ScopePtr& scope, TString* out);
  Value Eval(const Expr& e, const ScopePtr& scope);
  Value EvalFilter(const Expr& e, const ScopePtr& scope, const Value* input);
  void EvalArgs(const Expr& e, const ScopePtr& scope, CallArgs* args);
  Value Lookup(const std::string* sym, const ScopePtr& scope);
  void Assign(const Target& t, const Value& v, const ScopePtr& scope);
  Value Binary(const std::string& op, const Value& a, const Value& b);
  Value Slice(const Value& obj, const Expr& slice, const ScopePtr& scope);
  void Step(int line) {
    line_ = line;
    if (++steps_ > limits_.max_steps) StepsExhausted();
  }
  void CheckOutput(const TString& out) const {
    if (out.size() > limits_.max_output_bytes) OutputTooLarge();
  }
  [[noreturn]] void StepsExhausted() const;
  [[noreturn]] void OutputTooLarge() const;
  // Holds one level of evaluator recursion (max_eval_depth) for its lifetime.
  struct Nest {
    explicit Nest(Interpreter* in) : in(in) {
      if (++in->eval_depth_ > in->limits_.max_eval_depth ||
          reinterpret_cast<uintptr_t>(__builtin_frame_address(0)) < in->stack_floor_) {
        in->TooDeep();
      }
    }
    ~Nest() { --in->eval_depth_; }
    Interpreter* in;
  };
  [[noreturn]] void TooDeep();

  const TemplateAst& ast_;
  RenderLimits limits_;
  std::function<std::string(const std::string&)> strftime_;
  void ReleaseCycles();

  ScopePtr root_;
  // Scopes holding macros (a macro holds its scope: a cycle) and namespaces, emptied at the end.
  std::vector<ScopePtr> macro_scopes_;
  std::vector<Value> namespaces_;
  int line_ = 0;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
  int eval_depth_ = 0;
  uintptr_t stack_floor_ = 0;  // Nest raises below this address (stacks grow down here)
};

}  // namespace moe::text::jinja
