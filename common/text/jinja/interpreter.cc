#include "common/text/jinja/interpreter.h"

#include <pthread.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/text/jinja/budget.h"
#include "common/text/jinja/builtins.h"

namespace moe::text::jinja {
namespace {

std::string QuoteName(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('\'');
  out.append(s);
  out.push_back('\'');
  return out;
}

// Jinja2's object_type_repr: "dict object", "None", ...
std::string ObjectTypeRepr(const Value& v) {
  if (v.is_none()) return "None";
  return absl::StrCat(TypeName(v), " object");
}

Value MissingAttr(const Value& obj, std::string_view name) {
  return Value::Undefined(absl::StrCat(QuoteName(ObjectTypeRepr(obj)), " has no attribute ", QuoteName(name)));
}

Value MissingItem(const Value& obj, const Value& key) {
  if (key.is_string()) return MissingAttr(obj, key.str().view());
  return Value::Undefined(absl::StrCat(ObjectTypeRepr(obj), " has no element ", Repr(key).str()));
}

class Macro final : public Callable {  // holds its scope; Interpreter::ReleaseCycles frees both
 public:
  Macro(const Stmt* def, Interpreter::ScopePtr scope) : Callable(def->name), def_(def), scope_(std::move(scope)) {}
  Value Call(Interpreter& in, CallArgs& args) const override { return in.RunMacro(*def_, scope_, args); }
  const char* type_name() const override { return "Macro"; }

 private:
  const Stmt* def_;
  Interpreter::ScopePtr scope_;
};

Int FloorDiv(Int a, Int b) {
  Int q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

Int PyMod(Int a, Int b) {
  Int r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

[[noreturn]] void Unsupported(const char* op, const Value& a, const Value& b) {
  Throw("TypeError", absl::StrCat("unsupported operand type(s) for ", op, ": '", TypeName(a), "' and '", TypeName(b), "'"));
}

Int CheckedInt(long double approx, Int exact) {
  if (std::fabs(approx) > 1.0e37L) Throw("OverflowError", "integer result too large for this engine");
  return exact;
}

// Refuses building `n` copies of `bytes` bytes past the render's work budget before any is built.
void CheckRepeat(size_t bytes, Int n) {
  const long double want = static_cast<long double>(bytes) * static_cast<long double>(n);
  RenderBudget::Check(want >= 1.0e19L ? UINT64_MAX : static_cast<uint64_t>(want));
}

TString Repeat(const TString& s, Int n) {
  TString out;
  if (n <= 0 || s.empty()) return out;  // (an empty string any number of times: no loop)
  CheckRepeat(s.size(), n);
  for (Int i = 0; i < n; ++i) out.Append(s);
  return out;
}

// base ** exp for exp >= 0, by squaring (exp can be any integer: 1 ** 10**30 is 1).
Int IntPow(Int base, Int exp) {
  if (base == 0) return exp == 0 ? 1 : 0;
  if (base == 1) return 1;
  if (base == -1) return (exp % 2) ? -1 : 1;
  if (std::pow(std::fabs(static_cast<long double>(base)), static_cast<long double>(exp)) > 1.0e37L) {
    Throw("OverflowError", "integer result too large for this engine");
  }
  Int r = 1;
  for (Int b = base, e = exp; e > 0; e >>= 1, b = e > 0 ? b * b : b) {
    if (e & 1) r *= b;
  }
  return r;
}

// Python's slice.indices(len) semantics.
void SliceIndices(const Value& start, const Value& stop, const Value& step, int64_t len, int64_t* a, int64_t* b,
                  int64_t* st) {
  auto as_int = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (v.kind() != Kind::kInt && v.kind() != Kind::kBool) {
      Throw("TypeError", absl::StrCat("slice indices must be integers or None, not ", TypeName(v), " (", what, ")"));
    }
    const Int i = v.as_int();
    return static_cast<int64_t>(std::max<Int>(std::min<Int>(i, INT64_MAX / 2), INT64_MIN / 2));
  };
  const auto s = as_int(step, "step");
  *st = s.value_or(1);
  if (*st == 0) Throw("ValueError", "slice step cannot be zero");
  const auto lo = as_int(start, "start"), hi = as_int(stop, "stop");
  auto clamp = [&](std::optional<int64_t> v, bool is_start) -> int64_t {
    if (!v) {
      if (*st > 0) return is_start ? 0 : len;
      return is_start ? len - 1 : -1;
    }
    int64_t x = *v;
    if (x < 0) {
      x += len;
      if (x < 0) x = *st > 0 ? 0 : -1;
    } else if (x >= len) {
      x = *st > 0 ? len : len - 1;
    }
    return x;
  };
  *a = clamp(lo, true);
  *b = clamp(hi, false);
}

}  // namespace

Interpreter::Interpreter(const TemplateAst& ast, RenderLimits limits,
                         std::function<std::string(const std::string&)> strftime)
    : ast_(ast), limits_(limits), strftime_(std::move(strftime)) {}

void Interpreter::StepsExhausted() const {
  Throw("TemplateRuntimeError", absl::StrCat("the template ran too long: more than ", limits_.max_steps,
                                             " steps (limit max_steps)"));
}

void Interpreter::OutputTooLarge() const {
  Throw("TemplateRuntimeError", absl::StrCat("the template's output is too large: more than ",
                                             limits_.max_output_bytes, " bytes (limit max_output_bytes)"));
}

void Interpreter::TooDeep() {
  --eval_depth_;  // (the Nest that raises is not constructed: it never decrements)
  if (eval_depth_ < limits_.max_eval_depth) {
    Throw("RecursionError", absl::StrCat("maximum recursion depth exceeded: the render used more than ",
                                         limits_.max_stack_bytes, " bytes of native stack (limit max_stack_bytes)"));
  }
  Throw("RecursionError", absl::StrCat("maximum recursion depth exceeded: more than ", limits_.max_eval_depth,
                                       " nested statements, expressions and macro calls (limit max_eval_depth)"));
}

// The lowest frame address a render starting here may reach: max_stack_bytes below the
// current frame, and never within 1 MiB of the end of this thread's stack.
static uintptr_t StackFloor(size_t max_bytes) {
  const uintptr_t here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  uintptr_t floor = here > max_bytes ? here - max_bytes : 0;
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    void* low = nullptr;
    size_t size = 0;
    if (pthread_attr_getstack(&attr, &low, &size) == 0 && low) {
      floor = std::max(floor, reinterpret_cast<uintptr_t>(low) + (1u << 20));
    }
    pthread_attr_destroy(&attr);
  }
  return floor;
}

TString Interpreter::Render(const Dict& vars) {
  RenderBudget budget(std::min<uint64_t>(limits_.max_work_bytes, UINT32_MAX));
  stack_floor_ = StackFloor(limits_.max_stack_bytes);
  root_ = std::make_shared<Scope>();
  for (const auto& [k, v] : vars.items()) {
    if (!k.is_string()) continue;
    // A variable the template never names cannot be read: Jinja2 has no dynamic lookup.
    if (const std::string* sym = ast_.symbols.Find(k.str().view())) root_->Set(sym, v);
  }
  TString out;
  try {
    Exec(ast_.body, root_, &out);
  } catch (TemplateError& e) {
    if (e.line == 0) e.line = line_;
    ReleaseCycles();
    throw;
  }
  ReleaseCycles();
  return out;
}

void Interpreter::ReleaseCycles() {
  for (const ScopePtr& s : macro_scopes_) s->vars.clear();
  for (const Value& ns : namespaces_) ns.ns().attrs = Dict();
  macro_scopes_.clear();
  namespaces_.clear();
  root_.reset();
}

Interpreter::Flow Interpreter::Exec(const Body& body, const ScopePtr& scope, TString* out) {
  for (const auto& s : body) {
    const Flow f = ExecStmt(*s, scope, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::ExecStmt(const Stmt& s, const ScopePtr& scope, TString* out) {
  Step(s.line);
  const Nest nest(this);
  switch (s.kind) {
    case StmtKind::kData:
      out->Append(s.data);
      CheckOutput(*out);
      return Flow::kNormal;
    case StmtKind::kOutput: {
      const Value v = Eval(*s.expr, scope);
      out->Append(ToStr(v));
      CheckOutput(*out);
      return Flow::kNormal;
    }
    case StmtKind::kIf:
      for (size_t i = 0; i < s.tests.size(); ++i) {
        if (Eval(*s.tests[i], scope).Truthy()) return Exec(s.bodies[i], scope, out);
      }
      return Exec(s.else_body, scope, out);
    case StmtKind::kFor:
      ExecFor(s, scope, out);
      return Flow::kNormal;
    case StmtKind::kSet:
      Assign(s.target, Eval(*s.expr, scope), scope);
      return Flow::kNormal;
    case StmtKind::kSetBlock: {
      TString captured;
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      Exec(s.body, inner, &captured);
      Value v = Value::Str(std::move(captured));
      if (s.expr) v = EvalFilter(*s.expr, scope, &v);
      Assign(s.target, v, scope);
      return Flow::kNormal;
    }
    case StmtKind::kMacro:
      scope->Set(s.name_sym, Value::MakeCallable(new Macro(&s, scope)));
      macro_scopes_.push_back(scope);
      return Flow::kNormal;
    case StmtKind::kCallBlock: {
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      TString captured;
      Exec(s.body, inner, &captured);
      out->Append(captured);
      CheckOutput(*out);
      return Flow::kNormal;
    }
    case StmtKind::kFilterBlock: {
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      TString captured;
      Exec(s.body, inner, &captured);
      const Value in = Value::Str(std::move(captured));
      out->Append(ToStr(EvalFilter(*s.expr, scope, &in)));
      CheckOutput(*out);
      return Flow::kNormal;
    }
    case StmtKind::kWith: {
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      for (size_t i = 0; i < s.with_targets.size(); ++i) Assign(s.with_targets[i], Eval(*s.with_values[i], scope), inner);
      return Exec(s.body, inner, out);
    }
    case StmtKind::kBreak:
      return Flow::kBreak;
    case StmtKind::kContinue:
      return Flow::kContinue;
  }
  return Flow::kNormal;
}

void Interpreter::ExecFor(const Stmt& s, const ScopePtr& scope, TString* out) {
  const Value iter = Eval(*s.expr, scope);
  List items = Iterate(iter);
  if (s.filter) {
    List kept;
    for (Value& item : items) {
      Step(s.line);
      auto probe = std::make_shared<Scope>();
      probe->parent = scope;
      Assign(s.target, item, probe);
      if (Eval(*s.filter, probe).Truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    Exec(s.else_body, scope, out);
    return;
  }
  auto* state = new LoopState();
  state->items = std::move(items);
  const Value loop = Value::MakeLoop(state);
  ScopePtr iter_scope;
  for (size_t i = 0; i < state->items.size(); ++i) {
    Step(s.line);  // an iteration is a step even when its body is empty
    state->index = i;
    // Each iteration is a fresh scope (Jinja2); the last one is reused when nothing (a macro
    // defined in it) kept it.
    if (iter_scope && iter_scope.use_count() == 1) {
      iter_scope->vars.clear();
    } else {
      iter_scope = std::make_shared<Scope>();
      iter_scope->parent = scope;
    }
    Assign(s.target, state->items[i], iter_scope);
    iter_scope->Set(ast_.loop_sym, loop);
    const Flow f = Exec(s.body, iter_scope, out);
    if (f == Flow::kBreak) break;
  }
}

void Interpreter::Assign(const Target& t, const Value& v, const ScopePtr& scope) {
  if (!t.attr.empty()) {
    const Value ns = Lookup(t.syms[0], scope);
    if (ns.kind() != Kind::kNamespace) Throw("TemplateRuntimeError", "cannot assign attribute on non-namespace object");
    if (!t.attr.empty() && t.attr[0] == '_') {
      Throw("SecurityError", absl::StrCat("Chat templates cannot store underscore-prefixed attributes on a namespace, "
                                          "but got ", QuoteName(t.attr), ". Please rename the attribute."));
    }
    ns.ns().attrs.Set(Value::Str(t.attr), v);
    return;
  }
  if (!t.tuple) {
    scope->Set(t.syms[0], v);
    return;
  }
  const List items = Iterate(v.Defined());
  if (items.size() != t.names.size()) {
    Throw("ValueError", items.size() < t.names.size()
                            ? absl::StrCat("not enough values to unpack (expected ", t.names.size(), ", got ", items.size(), ")")
                            : absl::StrCat("too many values to unpack (expected ", t.names.size(), ")"));
  }
  for (size_t i = 0; i < items.size(); ++i) scope->Set(t.syms[i], items[i]);
}

Value Interpreter::Lookup(const std::string* sym, const ScopePtr& scope) {
  for (Scope* p = scope.get(); p; p = p->parent.get()) {
    if (Value* v = p->Find(sym)) return *v;
  }
  Value g;
  if (FindGlobal(*sym, &g)) return g;
  return Value::Undefined(absl::StrCat(QuoteName(*sym), " is undefined"));
}

Value Interpreter::RunMacro(const Stmt& m, const ScopePtr& defined_in, CallArgs& args) {
  if (++call_depth_ > limits_.max_call_depth) {
    --call_depth_;
    Throw("RecursionError", absl::StrCat("maximum recursion depth exceeded in macro '", m.name, "': more than ",
                                         limits_.max_call_depth, " nested calls (limit max_call_depth)"));
  }
  struct Leave {
    int* d;
    ~Leave() { --*d; }
  } leave{&call_depth_};
  auto scope = std::make_shared<Scope>();
  scope->parent = defined_in;
  const size_t n = m.params.size();
  const size_t first_default = n - m.defaults.size();
  std::vector<bool> bound(n, false);
  for (size_t i = 0; i < args.pos.size() && i < n; ++i) {
    scope->Set(m.param_syms[i], args.pos[i]);
    bound[i] = true;
  }
  List extra_pos;
  for (size_t i = n; i < args.pos.size(); ++i) extra_pos.push_back(args.pos[i]);
  Dict extra_kw;
  for (auto& [k, v] : args.kw) {
    size_t idx = n;
    for (size_t i = 0; i < n; ++i) {
      if (m.params[i] == k) idx = i;
    }
    if (idx == n) {
      extra_kw.Set(Value::Str(k), v);
      continue;
    }
    if (bound[idx]) Throw("TypeError", absl::StrCat("macro '", m.name, "' got multiple values for argument '", k, "'"));
    scope->Set(m.param_syms[idx], v);
    bound[idx] = true;
  }
  if (!extra_pos.empty() && !m.uses_varargs) {
    Throw("TypeError", absl::StrCat("macro '", m.name, "' takes not more than ", n, " argument(s)"));
  }
  if (!extra_kw.empty() && !m.uses_kwargs) {
    Throw("TypeError", absl::StrCat("macro '", m.name, "' takes no keyword argument '", extra_kw.items()[0].first.str().str(), "'"));
  }
  for (size_t i = 0; i < n; ++i) {
    if (bound[i]) continue;
    if (i >= first_default) {
      scope->Set(m.param_syms[i], Eval(*m.defaults[i - first_default], scope));
    } else {
      scope->Set(m.param_syms[i], Value::Undefined(absl::StrCat("parameter ", QuoteName(m.params[i]), " was not provided")));
    }
  }
  if (m.uses_varargs) scope->Set(ast_.varargs_sym, Value::MakeTuple(std::move(extra_pos)));
  if (m.uses_kwargs) scope->Set(ast_.kwargs_sym, Value::MakeDict(std::move(extra_kw)));
  TString out;
  Exec(m.body, scope, &out);
  return Value::Str(std::move(out));
}

Value Interpreter::Call(const Value& fn, CallArgs& args) {
  if (fn.kind() == Kind::kCallable) return fn.callable().Call(*this, args);
  if (fn.is_undefined()) fn.Fail();
  Throw("TypeError", absl::StrCat("'", TypeName(fn), "' object is not callable"));
}

Value Interpreter::GetAttr(const Value& obj, std::string_view name) {
  if (obj.is_undefined()) obj.Fail();
  if (name.size() >= 2 && name[0] == '_' && name[1] == '_') {
    return Value::Undefined(absl::StrCat("access to attribute ", QuoteName(name), " of ", QuoteName(TypeName(obj)),
                                         " object is unsafe."),
                            "SecurityError");
  }
  Value m;
  if (FindMethod(obj, name, &m)) return m;
  switch (obj.kind()) {
    case Kind::kDict:
      if (const Value* v = obj.dict().FindStr(name)) return *v;
      break;
    case Kind::kNamespace:
      if (const Value* v = obj.ns().attrs.FindStr(name)) return *v;
      break;
    case Kind::kLoop: {
      const LoopState& l = obj.loop();
      const size_t n = l.items.size(), i = l.index;
      if (name == "index") return Value::FromInt(static_cast<Int>(i + 1));
      if (name == "index0") return Value::FromInt(static_cast<Int>(i));
      if (name == "revindex") return Value::FromInt(static_cast<Int>(n - i));
      if (name == "revindex0") return Value::FromInt(static_cast<Int>(n - i - 1));
      if (name == "first") return Value::Bool(i == 0);
      if (name == "last") return Value::Bool(i + 1 == n);
      if (name == "length") return Value::FromInt(static_cast<Int>(n));
      if (name == "depth") return Value::FromInt(l.depth);
      if (name == "depth0") return Value::FromInt(l.depth - 1);
      if (name == "previtem") return i > 0 ? l.items[i - 1] : Value::Undefined("there is no previous item");
      if (name == "nextitem") return i + 1 < n ? l.items[i + 1] : Value::Undefined("there is no next item");
      break;
    }
    default:
      break;
  }
  return MissingAttr(obj, name);
}

Value Interpreter::GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) obj.Fail();
  switch (obj.kind()) {
    case Kind::kDict:
      if (key.kind() == Kind::kList || key.kind() == Kind::kDict) break;
      if (const Value* v = obj.dict().Find(key)) return *v;
      break;
    case Kind::kList:
    case Kind::kTuple:
    case Kind::kString:
      if (key.kind() == Kind::kInt || key.kind() == Kind::kBool) {
        const bool is_str = obj.is_string();
        std::vector<uint32_t> off;
        const int64_t len = is_str ? static_cast<int64_t>((off = CodePointOffsets(obj.str().view())).size() - 1)
                                   : static_cast<int64_t>(obj.list().size());
        Int i = key.as_int();
        if (i < 0) i += len;
        if (i < 0 || i >= len) return MissingItem(obj, key);
        if (is_str) return Value::Str(obj.str().Sub(off[static_cast<size_t>(i)], off[static_cast<size_t>(i) + 1]));
        return obj.list()[static_cast<size_t>(i)];
      }
      break;
    default:
      break;
  }
  if (key.is_string()) {
    const std::string_view name = key.str().view();
    if (name.size() >= 2 && name[0] == '_' && name[1] == '_') return GetAttr(obj, name);
    Value m;
    if (FindMethod(obj, name, &m)) return m;
    if (obj.kind() == Kind::kNamespace || obj.kind() == Kind::kLoop) return GetAttr(obj, name);
  }
  return MissingItem(obj, key);
}

Value Interpreter::Slice(const Value& obj, const Expr& sl, const ScopePtr& scope) {
  const Value start = sl.a ? Eval(*sl.a, scope) : Value::None();
  const Value stop = sl.b ? Eval(*sl.b, scope) : Value::None();
  const Value step = sl.c ? Eval(*sl.c, scope) : Value::None();
  if (obj.is_undefined()) obj.Fail();
  if (!obj.is_string() && !obj.is_sequence()) {
    if (obj.kind() == Kind::kDict) Throw("TypeError", "unhashable type: 'slice'");
    return Value::Undefined(absl::StrCat(ObjectTypeRepr(obj), " has no element slice"));
  }
  std::vector<uint32_t> off;
  const bool is_str = obj.is_string();
  const int64_t len = is_str ? static_cast<int64_t>((off = CodePointOffsets(obj.str().view())).size() - 1)
                             : static_cast<int64_t>(obj.list().size());
  int64_t a, b, st;
  SliceIndices(start, stop, step, len, &a, &b, &st);
  if (is_str) {
    const TString& s = obj.str();
    if (st == 1) return Value::Str(a < b ? s.Sub(off[a], off[b]) : TString());
    TString out;
    for (int64_t i = a; st > 0 ? i < b : i > b; i += st) out.Append(s.Sub(off[i], off[i + 1]));
    return Value::Str(std::move(out));
  }
  List items;
  for (int64_t i = a; st > 0 ? i < b : i > b; i += st) items.push_back(obj.list()[static_cast<size_t>(i)]);
  return obj.kind() == Kind::kTuple ? Value::MakeTuple(std::move(items)) : Value::MakeList(std::move(items));
}

void Interpreter::EvalArgs(const Expr& e, const ScopePtr& scope, CallArgs* args) {
  for (const auto& a : e.args) args->pos.push_back(Eval(*a, scope));
  for (const auto& [k, v] : e.kwargs) args->kw.emplace_back(k, Eval(*v, scope));
  if (e.dyn_args) {
    for (Value& v : Iterate(Eval(*e.dyn_args, scope))) args->pos.push_back(std::move(v));
  }
  if (e.dyn_kwargs) {
    const Value d = Eval(*e.dyn_kwargs, scope);
    if (d.kind() != Kind::kDict) Throw("TypeError", "argument after ** must be a mapping");
    for (const auto& [k, v] : d.dict().items()) {
      if (!k.is_string()) Throw("TypeError", "keywords must be strings");
      args->kw.emplace_back(k.str().str(), v);
    }
  }
}

Value Interpreter::EvalFilter(const Expr& e, const ScopePtr& scope, const Value* input) {
  Value in = e.a ? EvalFilter(*e.a, scope, input) : (input ? *input : Value());
  if (e.kind != ExprKind::kFilter) return Eval(e, scope);
  Step(e.line);
  CallArgs args;
  EvalArgs(e, scope, &args);
  return (*static_cast<const FilterFn*>(e.builtin))(*this, in, args);
}

Value Interpreter::ApplyFilter(std::string_view name, const Value& input, CallArgs& args) {
  const FilterFn* f = FindFilter(name);
  if (!f) Throw("TemplateRuntimeError", absl::StrCat("No filter named ", QuoteName(name), "."));
  return (*f)(*this, input, args);
}

bool Interpreter::ApplyTest(std::string_view name, const Value& input, CallArgs& args) {
  const TestFn* t = FindTest(name);
  if (!t) Throw("TemplateRuntimeError", absl::StrCat("No test named ", QuoteName(name), "."));
  return (*t)(*this, input, args);
}

Value Interpreter::Eval(const Expr& e, const ScopePtr& scope) {
  Step(e.line);
  const Nest nest(this);
  switch (e.kind) {
    case ExprKind::kConst:
      return e.value;
    case ExprKind::kName:
      return Lookup(e.sym, scope);
    case ExprKind::kGetattr:
      return GetAttr(Eval(*e.a, scope), e.name);
    case ExprKind::kGetitem: {
      const Value obj = Eval(*e.a, scope);
      if (e.b->kind == ExprKind::kSlice) return Slice(obj, *e.b, scope);
      return GetItem(obj, Eval(*e.b, scope));
    }
    case ExprKind::kSlice:
      Throw("TemplateSyntaxError", "a slice outside []");
    case ExprKind::kCall: {
      if (e.a->kind == ExprKind::kGetattr) {  // obj.method(...): no bound callable is built
        const Value obj = Eval(*e.a->a, scope);
        if (obj.is_undefined()) obj.Fail();
        CallArgs args;
        EvalArgs(e, scope, &args);
        line_ = e.line;
        Value r;
        if (CallMethod(*this, obj, e.a->name, args, &r)) return r;
        const Value fn = GetAttr(obj, e.a->name);
        r = Call(fn, args);
        line_ = e.line;
        return r;
      }
      const Value fn = Eval(*e.a, scope);
      CallArgs args;
      EvalArgs(e, scope, &args);
      const int line = e.line;
      Value r = Call(fn, args);
      line_ = line;
      return r;
    }
    case ExprKind::kFilter: {
      const Value in = Eval(*e.a, scope);
      CallArgs args;
      EvalArgs(e, scope, &args);
      line_ = e.line;
      return (*static_cast<const FilterFn*>(e.builtin))(*this, in, args);
    }
    case ExprKind::kTest: {
      const Value in = Eval(*e.a, scope);
      CallArgs args;
      EvalArgs(e, scope, &args);
      line_ = e.line;
      return Value::Bool((*static_cast<const TestFn*>(e.builtin))(*this, in, args));
    }
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      const Value v = Eval(*e.a, scope);
      if (v.is_undefined()) v.Fail();
      if (v.kind() == Kind::kFloat) return Value::Float(e.kind == ExprKind::kNeg ? -v.as_float() : v.as_float());
      if (v.kind() == Kind::kInt || v.kind() == Kind::kBool) {
        return Value::FromInt(e.kind == ExprKind::kNeg ? -v.as_int() : v.as_int());
      }
      Throw("TypeError", absl::StrCat("bad operand type for unary ", e.kind == ExprKind::kNeg ? "-" : "+", ": '",
                                      TypeName(v), "'"));
    }
    case ExprKind::kNot:
      return Value::Bool(!Eval(*e.a, scope).Truthy());
    case ExprKind::kAnd: {
      Value l = Eval(*e.a, scope);
      if (!l.Truthy()) return l;
      return Eval(*e.b, scope);
    }
    case ExprKind::kOr: {
      Value l = Eval(*e.a, scope);
      if (l.Truthy()) return l;
      return Eval(*e.b, scope);
    }
    case ExprKind::kBinary: {
      const Value l = Eval(*e.a, scope);
      const Value r = Eval(*e.b, scope);
      line_ = e.line;
      return Binary(e.name, l, r);
    }
    case ExprKind::kConcat: {
      TString out;
      for (const auto& a : e.args) out.Append(ToStr(Eval(*a, scope)));
      return Value::Str(std::move(out));
    }
    case ExprKind::kCompare: {
      Value left = Eval(*e.a, scope);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = Eval(*e.args[i], scope);
        const std::string& op = e.ops[i];
        line_ = e.line;
        bool ok;
        if (op == "eq") {
          ok = Equal(left, right);
        } else if (op == "ne") {
          ok = !Equal(left, right);
        } else if (op == "lt") {
          ok = Less(left, right);
        } else if (op == "gt") {
          ok = Less(right, left);
        } else if (op == "lteq") {
          ok = !Less(right, left);
        } else if (op == "gteq") {
          ok = !Less(left, right);
        } else if (op == "in") {
          ok = Contains(right, left);
        } else {
          ok = !Contains(right, left);
        }
        if (!ok) return Value::Bool(false);
        left = std::move(right);
      }
      return Value::Bool(true);
    }
    case ExprKind::kCond:
      if (Eval(*e.a, scope).Truthy()) return Eval(*e.b, scope);
      if (e.c) return Eval(*e.c, scope);
      return Value::Undefined(absl::StrCat("the inline if-expression on line ", e.line,
                                           " evaluated to false and no else section was defined."));
    case ExprKind::kList:
    case ExprKind::kTuple: {
      List items;
      items.reserve(e.args.size());
      for (const auto& a : e.args) items.push_back(Eval(*a, scope));
      return e.kind == ExprKind::kList ? Value::MakeList(std::move(items)) : Value::MakeTuple(std::move(items));
    }
    case ExprKind::kDict: {
      Dict d;
      for (size_t i = 0; i < e.keys.size(); ++i) {
        Value k = Eval(*e.keys[i], scope);
        if (k.kind() == Kind::kList || k.kind() == Kind::kDict) {
          Throw("TypeError", absl::StrCat("unhashable type: '", TypeName(k), "'"));
        }
        d.Set(std::move(k), Eval(*e.args[i], scope));
      }
      return Value::MakeDict(std::move(d));
    }
  }
  return Value();
}

Value Interpreter::Binary(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) a.Fail();
  if (b.is_undefined()) b.Fail();
  const bool nums = a.is_number() && b.is_number();
  const bool flt = nums && (a.kind() == Kind::kFloat || b.kind() == Kind::kFloat);
  const char o = op[0];
  if (op == "+") {
    if (nums) {
      if (flt) return Value::Float(a.as_float() + b.as_float());
      return Value::FromInt(CheckedInt(static_cast<long double>(a.as_int()) + b.as_int(), a.as_int() + b.as_int()));
    }
    if (a.is_string() && b.is_string()) {
      TString s = a.str();
      s.Append(b.str());
      return Value::Str(std::move(s));
    }
    if (a.kind() == b.kind() && a.is_sequence()) {
      List items = a.list();
      items.insert(items.end(), b.list().begin(), b.list().end());
      return a.kind() == Kind::kTuple ? Value::MakeTuple(std::move(items)) : Value::MakeList(std::move(items));
    }
    if (a.is_string() || a.is_sequence()) {
      Throw("TypeError", absl::StrCat("can only concatenate ", TypeName(a), " (not \"", TypeName(b), "\") to ", TypeName(a)));
    }
    Unsupported("+", a, b);
  }
  if (op == "*") {
    if (nums) {
      if (flt) return Value::Float(a.as_float() * b.as_float());
      return Value::FromInt(CheckedInt(static_cast<long double>(a.as_int()) * b.as_int(), a.as_int() * b.as_int()));
    }
    const Value* seq = (a.is_string() || a.is_sequence()) ? &a : (b.is_string() || b.is_sequence()) ? &b : nullptr;
    const Value* n = seq == &a ? &b : &a;
    if (seq && (n->kind() == Kind::kInt || n->kind() == Kind::kBool)) {
      if (seq->is_string()) return Value::Str(Repeat(seq->str(), n->as_int()));
      List items;
      if (!seq->list().empty() && n->as_int() > 0) {
        CheckRepeat(seq->list().size() * sizeof(Value), n->as_int());
        for (Int i = 0; i < n->as_int(); ++i) items.insert(items.end(), seq->list().begin(), seq->list().end());
      }
      return seq->kind() == Kind::kTuple ? Value::MakeTuple(std::move(items)) : Value::MakeList(std::move(items));
    }
    if (seq) Throw("TypeError", absl::StrCat("can't multiply sequence by non-int of type '", TypeName(*n), "'"));
    Unsupported("*", a, b);
  }
  if (op == "%" && a.is_string()) {
    CallArgs args;
    if (b.kind() == Kind::kTuple) {
      args.pos = b.list();
    } else {
      args.pos.push_back(b);
    }
    return ApplyFilter("format", a, args);
  }
  if (!nums) Unsupported(op.c_str(), a, b);
  switch (o) {
    case '-':
      if (flt) return Value::Float(a.as_float() - b.as_float());
      return Value::FromInt(CheckedInt(static_cast<long double>(a.as_int()) - b.as_int(), a.as_int() - b.as_int()));
    case '/':
      if (op == "//") {
        if (flt) {
          if (b.as_float() == 0) Throw("ZeroDivisionError", "float floor division by zero");
          return Value::Float(std::floor(a.as_float() / b.as_float()));
        }
        if (b.as_int() == 0) Throw("ZeroDivisionError", "integer division or modulo by zero");
        return Value::FromInt(FloorDiv(a.as_int(), b.as_int()));
      }
      if (b.as_float() == 0) Throw("ZeroDivisionError", "division by zero");
      return Value::Float(a.as_float() / b.as_float());
    case '%':
      if (flt) {
        if (b.as_float() == 0) Throw("ZeroDivisionError", "float modulo");
        double r = std::fmod(a.as_float(), b.as_float());
        if (r != 0 && ((r < 0) != (b.as_float() < 0))) r += b.as_float();
        return Value::Float(r);
      }
      if (b.as_int() == 0) Throw("ZeroDivisionError", "integer division or modulo by zero");
      return Value::FromInt(PyMod(a.as_int(), b.as_int()));
    default:
      break;
  }
  if (op == "**") {
    if (!flt && b.as_int() >= 0) return Value::FromInt(IntPow(a.as_int(), b.as_int()));
    return Value::Float(std::pow(a.as_float(), b.as_float()));
  }
  Unsupported(op.c_str(), a, b);
}

}  // namespace moe::text::jinja
