// Values of the chat-template engine, with Python's semantics where templates can see them:
// what str() and repr() print, truthiness, ==, <, `in`, len(), json.dumps (the `tojson`
// filter transformers installs) -- chat templates are Jinja2 templates rendered by CPython,
// and every byte they print goes into a prompt.
//
// Kinds: Undefined (Jinja2's default Undefined: prints "", iterates empty, is false, and
// raises its message on any other use), None, bool, int (128-bit: every JSON integer fits),
// float, string (TString: tainted bytes), list, tuple, dict (insertion-ordered, as Python
// 3.7+), namespace (Jinja2's, the one mutable kind), callable (macros, methods, globals) and
// the loop object of a for-loop.
// Lists, tuples and dicts are immutable once built (the sandbox transformers uses forbids
// mutating them), so values share them freely.
// Errors: TemplateError carries Python's exception name (TypeError, UndefinedError, ...)
// and message; it never leaves the engine (template.h turns it into a Status).
// Thread safety: values built by one render are used by that render only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/text/jinja/tstring.h"
#include "nlohmann/json.hpp"

namespace moe::text::jinja {

// Thrown inside the engine; `kind` is the Python exception class name.
struct TemplateError {
  std::string kind;
  std::string message;
  int line = 0;  // template line, 0 until the interpreter fills it in
};
[[noreturn]] void Throw(std::string kind, std::string message);

enum class Kind : uint8_t {
  kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kTuple, kDict, kNamespace, kCallable, kLoop
};

class Value;
class Dict;
struct Namespace;
struct LoopState;
class Callable;
using Int = __int128;
using List = std::vector<Value>;

// Why a use of an undefined value fails (Jinja2's Undefined._undefined_message).
struct UndefinedInfo {
  std::string message;
  std::string exception = "UndefinedError";
};

struct Object {
  virtual ~Object() = default;
  uint32_t refs = 0;
  bool immortal = false;
};

// Intrusive and not atomic: an object lives inside one render, on one thread. Immortal ones
// (a template's constants, the globals) are shared read-only by every render and never
// counted, so renders on many threads do not contend on their reference counts.
class ObjRef {
 public:
  ObjRef() = default;
  explicit ObjRef(Object* p) : p_(p) { Inc(); }
  ObjRef(const ObjRef& o) : p_(o.p_) { Inc(); }
  ObjRef(ObjRef&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  ObjRef& operator=(const ObjRef& o) {
    ObjRef copy(o);
    std::swap(p_, copy.p_);
    return *this;
  }
  ObjRef& operator=(ObjRef&& o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }
  ~ObjRef() { Dec(); }
  Object* get() const { return p_; }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  void Inc() {
    if (p_ && !p_->immortal) ++p_->refs;
  }
  void Dec() {
    if (p_ && !p_->immortal && --p_->refs == 0) delete p_;
  }
  Object* p_ = nullptr;
};

class Value {
 public:
  Value() : kind_(Kind::kUndefined) {}
  static Value Undefined(std::string message, std::string exception = "UndefinedError");
  static Value None() { return Value(Kind::kNone); }
  static Value Bool(bool b);
  static Value FromInt(Int i);
  static Value Float(double f);
  static Value Str(TString s);
  static Value Str(std::string s, bool tainted = false) { return Str(TString(std::move(s), tainted)); }
  static Value MakeList(List items);
  static Value MakeTuple(List items);
  static Value MakeDict(Dict d);
  // These take ownership of a new object.
  static Value MakeNamespace(Namespace* ns);
  static Value MakeCallable(Callable* fn);
  static Value MakeLoop(LoopState* loop);
  // JSON from the client or the model's files. `tainted`: every string (keys included) is
  // client data. Integers keep their exact value; floats are doubles, as json.loads makes.
  static Value FromJson(const nlohmann::ordered_json& j, bool tainted);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_sequence() const { return kind_ == Kind::kList || kind_ == Kind::kTuple; }

  bool as_bool() const { return b_; }
  Int as_int() const { return kind_ == Kind::kBool ? Int(b_) : i_; }
  double as_float() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(as_int()); }
  const TString& str() const;
  const List& list() const;  // list or tuple
  const Dict& dict() const;
  Namespace& ns() const;
  const Callable& callable() const;
  LoopState& loop() const;
  const UndefinedInfo& undefined() const;

  // Nesting depth of a list/tuple/dict (1 + its deepest element's); 0 for other kinds.
  int depth() const;
  // Python's bool(x).
  bool Truthy() const;
  // Raises the undefined value's error (call only on an undefined value).
  [[noreturn]] void Fail() const;
  // Raises if undefined; returns *this otherwise (for operations Undefined refuses).
  const Value& Defined() const {
    if (kind_ == Kind::kUndefined) Fail();
    return *this;
  }
  // Makes the object shared read-only by all renders (never counted, never freed by values)
  // and hands its ownership to the caller; nullptr for kinds without one.
  Object* Immortalize();

 private:
  explicit Value(Kind k) : kind_(k) {}
  Kind kind_;
  union {
    bool b_;
    Int i_ = 0;
    double f_;
  };
  ObjRef obj_;
};

// Insertion-ordered mapping with Python's key equality (1 == 1.0 == True). Small dicts (the
// usual message or tool call) are scanned; a hash index is built past kIndexAt entries.
class Dict {
 public:
  const Value* Find(const Value& key) const;
  const Value* FindStr(std::string_view key) const;
  void Set(Value key, Value v);
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  const std::vector<std::pair<Value, Value>>& items() const { return items_; }

 private:
  static constexpr size_t kIndexAt = 12;
  std::vector<std::pair<Value, Value>> items_;
  absl::flat_hash_map<std::string, size_t> str_index_;  // only once items_.size() >= kIndexAt
};

struct Namespace : Object {
  Dict attrs;
};

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  const Value* Kw(std::string_view name) const;
};

class Interpreter;
class Callable : public Object {
 public:
  explicit Callable(std::string name) : name_(std::move(name)) {}
  virtual Value Call(Interpreter& in, CallArgs& args) const = 0;
  const std::string& name() const { return name_; }
  // Python's type name for repr and errors ("Macro", "builtin_function_or_method").
  virtual const char* type_name() const { return "builtin_function_or_method"; }

 private:
  std::string name_;
};

// A callable from a C++ function (globals, bound methods).
class NativeCallable final : public Callable {
 public:
  using Fn = std::function<Value(Interpreter&, CallArgs&)>;
  NativeCallable(std::string name, Fn fn) : Callable(std::move(name)), fn_(std::move(fn)) {}
  Value Call(Interpreter& in, CallArgs& args) const override { return fn_(in, args); }

 private:
  Fn fn_;
};

struct LoopState : Object {
  std::vector<Value> items;
  size_t index = 0;  // 0-based
  int depth = 1;  // always 1: recursive loops (the only deeper ones) are not supported
  Value last_changed;
  bool has_changed = false;
};

// ---- Python semantics -------------------------------------------------------------------

// Python's type(x).__name__ ("str", "NoneType", "dict", ...).
const char* TypeName(const Value& v);
// str(x) / repr(x). Strings keep their taint in str(); containers taint their whole text
// when any string inside is tainted.
TString ToStr(const Value& v);
TString Repr(const Value& v);
std::string PyFloatRepr(double d);
std::string PyIntRepr(Int i);
// x == y.
bool Equal(const Value& a, const Value& b);
// x < y; raises TypeError for unorderable kinds, as Python does.
bool Less(const Value& a, const Value& b);
// len(x); raises TypeError for kinds without one.
size_t Length(const Value& v);
// list(x): the items iterating x gives (dict: keys; string: characters); raises TypeError.
List Iterate(const Value& v);
// `needle in hay`.
bool Contains(const Value& hay, const Value& needle);
// Any tainted string inside (keys included)?
bool AnyTaint(const Value& v);

struct JsonOptions {
  bool ensure_ascii = false;
  int indent = -1;            // -1: none
  std::string indent_str;     // used when indent_is_str
  bool indent_is_str = false;
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
// json.dumps(x, ...) as transformers' tojson calls it; raises TypeError for values JSON
// cannot hold (Undefined, namespaces, callables).
TString JsonDumps(const Value& v, const JsonOptions& opt);

}  // namespace moe::text::jinja
