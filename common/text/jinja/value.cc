#include "common/text/jinja/value.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/text/jinja/budget.h"
#include "common/text/utf8.h"

namespace moe::text::jinja {
namespace {

struct StringObj : Object {
  TString s;
};
struct ListObj : Object {
  List items;
  int depth = 1;
};
struct DictObj : Object {
  Dict d;
  int depth = 1;
};
struct UndefinedObj : Object {
  UndefinedInfo info;
};

// Nesting bound for values and the walks over them (Python's own recursion limit is 1000
// frames). Containers record their depth when built, so no value deeper than this exists:
// destroying one recurses per level too.
constexpr int kMaxDepth = 512;

void CheckDepth(int depth) {
  if (depth > kMaxDepth) Throw("RecursionError", "maximum recursion depth exceeded while walking a value");
}

bool IsPrintable(int32_t cp) {
  if (cp < 0x20 || cp == 0x7F) return false;
  if (cp < 0x7F) return true;
  switch (u_charType(cp)) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
    case U_SPACE_SEPARATOR:
      return false;
    default:
      return true;
  }
}

void ReprString(std::string_view s, std::string* out) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  out->push_back(quote);
  char buf[16];
  for (size_t i = 0; i < s.size();) {
    int32_t cp;
    const int n = DecodeUtf8(s, i, &cp);
    if (cp < 0) cp = 0xFFFD;
    if (cp == quote || cp == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(cp));
    } else if (cp == '\t') {
      *out += "\\t";
    } else if (cp == '\n') {
      *out += "\\n";
    } else if (cp == '\r') {
      *out += "\\r";
    } else if (IsPrintable(cp)) {
      out->append(s.substr(i, n));
    } else {
      if (cp <= 0xFF) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(cp));
      } else if (cp <= 0xFFFF) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      } else {
        std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(cp));
      }
      *out += buf;
    }
    i += n;
  }
  out->push_back(quote);
}

void ReprInto(const Value& v, TString* out, int depth);

void ReprSeq(const List& items, char open, char close, bool tuple, TString* out, int depth) {
  out->Append(std::string_view(&open, 1));
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out->Append(", ");
    ReprInto(items[i], out, depth + 1);
  }
  if (tuple && items.size() == 1) out->Append(",");
  out->Append(std::string_view(&close, 1));
}

void ReprDict(const Dict& d, TString* out, int depth) {
  out->Append("{");
  bool first = true;
  for (const auto& [k, v] : d.items()) {
    if (!first) out->Append(", ");
    first = false;
    ReprInto(k, out, depth + 1);
    out->Append(": ");
    ReprInto(v, out, depth + 1);
  }
  out->Append("}");
}

void ReprInto(const Value& v, TString* out, int depth) {
  CheckDepth(depth);
  switch (v.kind()) {
    case Kind::kString: {
      std::string s;
      ReprString(v.str().view(), &s);
      out->Append(s, v.str().any_taint());
      return;
    }
    case Kind::kList:
      ReprSeq(v.list(), '[', ']', false, out, depth);
      return;
    case Kind::kTuple:
      ReprSeq(v.list(), '(', ')', true, out, depth);
      return;
    case Kind::kDict:
      ReprDict(v.dict(), out, depth);
      return;
    case Kind::kUndefined:
      out->Append("Undefined");
      return;
    case Kind::kNamespace:
      out->Append("<Namespace ");
      ReprDict(v.ns().attrs, out, depth);
      out->Append(">");
      return;
    default:
      out->Append(ToStr(v));
  }
}

// ---- json.dumps -------------------------------------------------------------------------

void JsonString(std::string_view s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  char buf[16];
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"': *out += "\\\""; break;
        case '\\': *out += "\\\\"; break;
        case '\n': *out += "\\n"; break;
        case '\r': *out += "\\r"; break;
        case '\t': *out += "\\t"; break;
        case '\b': *out += "\\b"; break;
        case '\f': *out += "\\f"; break;
        default:
          if (c < 0x20) {
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            *out += buf;
          } else {
            out->push_back(static_cast<char>(c));
          }
      }
      ++i;
      continue;
    }
    int32_t cp;
    const int n = DecodeUtf8(s, i, &cp);
    if (cp < 0) cp = 0xFFFD;
    if (!ensure_ascii) {
      if (cp == 0xFFFD && n == 1) {
        *out += "\xEF\xBF\xBD";
      } else {
        out->append(s.substr(i, n));
      }
    } else if (cp >= 0x10000) {
      const uint32_t u = static_cast<uint32_t>(cp) - 0x10000;
      std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (u >> 10), 0xDC00 + (u & 0x3FF));
      *out += buf;
    } else {
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      *out += buf;
    }
    i += n;
  }
  out->push_back('"');
}

std::string JsonFloat(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return PyFloatRepr(d);
}

struct JsonWriter {
  const JsonOptions& opt;
  std::string out;
  bool taint = false;

  void Newline(int level) {
    if (opt.indent < 0 && !opt.indent_is_str) return;
    // An indent of any size, at every level: checked before it is built.
    RenderBudget::Charge(1 + static_cast<uint64_t>(level) * (opt.indent_is_str ? opt.indent_str.size() : opt.indent));
    out.push_back('\n');
    for (int i = 0; i < level; ++i) {
      if (opt.indent_is_str) {
        out += opt.indent_str;
      } else {
        out.append(static_cast<size_t>(opt.indent), ' ');
      }
    }
  }
  void Sep(const std::string& sep) {  // separators can be any string the template passes
    RenderBudget::Charge(sep.size());
    out += sep;
  }
  bool Pretty() const { return opt.indent >= 0 || opt.indent_is_str; }

  std::string Key(const Value& k) {
    switch (k.kind()) {
      case Kind::kString:
        if (k.str().any_taint()) taint = true;
        return k.str().str();
      case Kind::kBool:
        return k.as_bool() ? "true" : "false";
      case Kind::kNone:
        return "null";
      case Kind::kInt:
        return PyIntRepr(k.as_int());
      case Kind::kFloat:
        return JsonFloat(k.as_float());
      default:
        Throw("TypeError", absl::StrCat("keys must be str, int, float, bool or None, not ", TypeName(k)));
    }
  }

  void Write(const Value& v, int level) {
    CheckDepth(level);
    switch (v.kind()) {
      case Kind::kNone:
        out += "null";
        return;
      case Kind::kBool:
        out += v.as_bool() ? "true" : "false";
        return;
      case Kind::kInt:
        out += PyIntRepr(v.as_int());
        return;
      case Kind::kFloat:
        out += JsonFloat(v.as_float());
        return;
      case Kind::kString: {
        if (v.str().any_taint()) taint = true;
        const size_t before = out.size();
        RenderBudget::Check(v.str().size());
        JsonString(v.str().view(), opt.ensure_ascii, &out);
        RenderBudget::Charge(out.size() - before);
        return;
      }
      case Kind::kList:
      case Kind::kTuple: {
        const List& items = v.list();
        if (items.empty()) {
          out += "[]";
          return;
        }
        out.push_back('[');
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) Sep(opt.item_sep);
          Newline(level + 1);
          Write(items[i], level + 1);
        }
        Newline(level);
        out.push_back(']');
        return;
      }
      case Kind::kDict: {
        const Dict& d = v.dict();
        if (d.empty()) {
          out += "{}";
          return;
        }
        std::vector<const std::pair<Value, Value>*> items;
        for (const auto& kv : d.items()) items.push_back(&kv);
        if (opt.sort_keys) {
          std::stable_sort(items.begin(), items.end(),
                           [](const auto* a, const auto* b) { return Less(a->first, b->first); });
        }
        out.push_back('{');
        bool first = true;
        for (const auto* kv : items) {
          if (!first) Sep(opt.item_sep);
          first = false;
          Newline(level + 1);
          const size_t before = out.size();
          JsonString(Key(kv->first), opt.ensure_ascii, &out);
          RenderBudget::Charge(out.size() - before);
          Sep(opt.key_sep);
          Write(kv->second, level + 1);
        }
        Newline(level);
        out.push_back('}');
        return;
      }
      default:
        Throw("TypeError", absl::StrCat("Object of type ",
                                        v.kind() == Kind::kNamespace ? "TemplateNamespace" : TypeName(v),
                                        " is not JSON serializable"));
    }
  }
};

bool NumEqual(const Value& a, const Value& b) {
  if (a.kind() == Kind::kFloat || b.kind() == Kind::kFloat) {
    if (a.kind() == Kind::kFloat && b.kind() == Kind::kFloat) return a.as_float() == b.as_float();
    // int vs float: exact comparison, as Python does.
    const Value& f = a.kind() == Kind::kFloat ? a : b;
    const Value& i = a.kind() == Kind::kFloat ? b : a;
    const double d = f.as_float();
    if (!std::isfinite(d) || d != std::floor(d)) return false;
    if (std::fabs(d) > 1.6e38) return false;
    return static_cast<Int>(d) == i.as_int();
  }
  return a.as_int() == b.as_int();
}

}  // namespace

void Throw(std::string kind, std::string message) { throw TemplateError{std::move(kind), std::move(message), 0}; }

Value Value::Undefined(std::string message, std::string exception) {
  Value v(Kind::kUndefined);
  auto* o = new UndefinedObj();
  o->info.message = std::move(message);
  o->info.exception = std::move(exception);
  v.obj_ = ObjRef(o);
  return v;
}

Object* Value::Immortalize() {
  Object* o = obj_.get();
  if (o) o->immortal = true;
  return o;
}

Value Value::Bool(bool b) {
  Value v(Kind::kBool);
  v.b_ = b;
  return v;
}

Value Value::FromInt(Int i) {
  Value v(Kind::kInt);
  v.i_ = i;
  return v;
}

Value Value::Float(double f) {
  Value v(Kind::kFloat);
  v.f_ = f;
  return v;
}

Value Value::Str(TString s) {
  Value v(Kind::kString);
  auto* o = new StringObj();
  o->s = std::move(s);
  v.obj_ = ObjRef(o);
  return v;
}

int Value::depth() const {
  if (kind_ == Kind::kList || kind_ == Kind::kTuple) return static_cast<const ListObj*>(obj_.get())->depth;
  if (kind_ == Kind::kDict) return static_cast<const DictObj*>(obj_.get())->depth;
  return 0;
}

Value Value::MakeList(List items) {
  Value v(Kind::kList);
  int depth = 1;
  for (const Value& e : items) depth = std::max(depth, e.depth() + 1);
  CheckDepth(depth);
  RenderBudget::Charge(items.size() * sizeof(Value));
  auto* o = new ListObj();
  o->depth = depth;
  o->items = std::move(items);
  v.obj_ = ObjRef(o);
  return v;
}

Value Value::MakeTuple(List items) {
  Value v = MakeList(std::move(items));
  v.kind_ = Kind::kTuple;
  return v;
}

Value Value::MakeDict(Dict d) {
  Value v(Kind::kDict);
  int depth = 1;
  for (const auto& [k, e] : d.items()) depth = std::max(depth, std::max(k.depth(), e.depth()) + 1);
  CheckDepth(depth);
  RenderBudget::Charge(d.size() * 2 * sizeof(Value));
  auto* o = new DictObj();
  o->depth = depth;
  o->d = std::move(d);
  v.obj_ = ObjRef(o);
  return v;
}

Value Value::MakeNamespace(Namespace* ns) {
  Value v(Kind::kNamespace);
  v.obj_ = ObjRef(ns);
  return v;
}

Value Value::MakeCallable(Callable* fn) {
  Value v(Kind::kCallable);
  v.obj_ = ObjRef(fn);
  return v;
}

Value Value::MakeLoop(LoopState* loop) {
  Value v(Kind::kLoop);
  v.obj_ = ObjRef(loop);
  return v;
}

namespace {
Value FromJsonAt(const nlohmann::ordered_json& j, bool tainted, int depth) {
  CheckDepth(depth);
  using T = nlohmann::json::value_t;
  switch (j.type()) {
    case T::null:
    case T::discarded:
      return Value::None();
    case T::boolean:
      return Value::Bool(j.get<bool>());
    case T::number_integer:
      return Value::FromInt(j.get<int64_t>());
    case T::number_unsigned:
      return Value::FromInt(static_cast<Int>(j.get<uint64_t>()));
    case T::number_float:
      return Value::Float(j.get<double>());
    case T::string: {
      const std::string& s = j.get_ref<const std::string&>();
      return Value::Str(IsValidUtf8(s) ? s : SanitizeUtf8(s), tainted);
    }
    case T::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(FromJsonAt(e, tainted, depth + 1));
      return Value::MakeList(std::move(items));
    }
    case T::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) {
        const std::string& k = it.key();
        d.Set(Value::Str(IsValidUtf8(k) ? k : SanitizeUtf8(k), tainted), FromJsonAt(it.value(), tainted, depth + 1));
      }
      return Value::MakeDict(std::move(d));
    }
    default:
      return Value::None();  // binary: not produced by the JSON parser
  }
}
}  // namespace

Value Value::FromJson(const nlohmann::ordered_json& j, bool tainted) { return FromJsonAt(j, tainted, 0); }

const TString& Value::str() const { return static_cast<const StringObj*>(obj_.get())->s; }
const List& Value::list() const { return static_cast<const ListObj*>(obj_.get())->items; }
const Dict& Value::dict() const { return static_cast<const DictObj*>(obj_.get())->d; }
Namespace& Value::ns() const { return *static_cast<Namespace*>(obj_.get()); }
const Callable& Value::callable() const { return *static_cast<const Callable*>(obj_.get()); }
LoopState& Value::loop() const { return *static_cast<LoopState*>(obj_.get()); }
const UndefinedInfo& Value::undefined() const {
  static const UndefinedInfo kPlain{"value is undefined", "UndefinedError"};
  return obj_ ? static_cast<const UndefinedObj*>(obj_.get())->info : kPlain;
}

void Value::Fail() const {
  const UndefinedInfo& u = undefined();
  Throw(u.exception, u.message);
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0;
    case Kind::kString:
      return !str().empty();
    case Kind::kList:
    case Kind::kTuple:
      return !list().empty();
    case Kind::kDict:
      return !dict().empty();
    default:
      return true;
  }
}

const Value* Dict::FindStr(std::string_view key) const {
  if (items_.size() < kIndexAt) {
    for (const auto& kv : items_) {
      if (kv.first.is_string() && kv.first.str().view() == key) return &kv.second;
    }
    return nullptr;
  }
  auto it = str_index_.find(absl::string_view(key.data(), key.size()));
  return it == str_index_.end() ? nullptr : &items_[it->second].second;
}

const Value* Dict::Find(const Value& key) const {
  if (key.is_string()) return FindStr(key.str().view());
  for (const auto& kv : items_) {
    if (!kv.first.is_string() && Equal(kv.first, key)) return &kv.second;
  }
  return nullptr;
}

void Dict::Set(Value key, Value v) {
  if (key.is_string()) {
    if (items_.size() < kIndexAt) {
      for (auto& kv : items_) {
        if (kv.first.is_string() && kv.first.str().view() == key.str().view()) {
          kv.second = std::move(v);
          return;
        }
      }
      items_.emplace_back(std::move(key), std::move(v));
      if (items_.size() == kIndexAt) {
        for (size_t i = 0; i < items_.size(); ++i) {
          if (items_[i].first.is_string()) str_index_.try_emplace(items_[i].first.str().str(), i);
        }
      }
      return;
    }
    auto [it, fresh] = str_index_.try_emplace(key.str().str(), items_.size());
    if (!fresh) {
      items_[it->second].second = std::move(v);
      return;
    }
    items_.emplace_back(std::move(key), std::move(v));
    return;
  }
  for (auto& kv : items_) {
    if (!kv.first.is_string() && Equal(kv.first, key)) {
      kv.second = std::move(v);
      return;
    }
  }
  items_.emplace_back(std::move(key), std::move(v));
}

const Value* CallArgs::Kw(std::string_view name) const {
  for (const auto& [k, v] : kw) {
    if (k == name) return &v;
  }
  return nullptr;
}

const char* TypeName(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return "list";
    case Kind::kTuple: return "tuple";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    case Kind::kCallable: return v.callable().type_name();
    case Kind::kLoop: return "LoopContext";
  }
  return "object";
}

std::string PyIntRepr(Int i) {
  if (i == 0) return "0";
  const bool neg = i < 0;
  unsigned __int128 u = neg ? static_cast<unsigned __int128>(-(i + 1)) + 1 : static_cast<unsigned __int128>(i);
  std::string s;
  while (u) {
    s.push_back(static_cast<char>('0' + static_cast<int>(u % 10)));
    u /= 10;
  }
  if (neg) s.push_back('-');
  std::reverse(s.begin(), s.end());
  return s;
}

std::string PyFloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  // sci: [-]D[.DDD]e(+|-)XX
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp = std::stoi(sci.substr(e + 1));
  const int decpt = exp + 1;  // value = 0.DIGITS * 10^decpt
  std::string out = sign;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-decpt), '0');
      out += digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out += digits;
      out.append(static_cast<size_t>(decpt) - digits.size(), '0');
      out += ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt));
      out += ".";
      out += digits.substr(static_cast<size_t>(decpt));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) {
    out += ".";
    out += digits.substr(1);
  }
  const int x = decpt - 1;
  char eb[16];
  std::snprintf(eb, sizeof(eb), "e%c%02d", x < 0 ? '-' : '+', x < 0 ? -x : x);
  out += eb;
  return out;
}

TString ToStr(const Value& v) {
  switch (v.kind()) {
    case Kind::kString:
      return v.str();
    case Kind::kUndefined:
      return TString();
    case Kind::kNone:
      return TString("None");
    case Kind::kBool:
      return TString(v.as_bool() ? "True" : "False");
    case Kind::kInt:
      return TString(PyIntRepr(v.as_int()));
    case Kind::kFloat:
      return TString(PyFloatRepr(v.as_float()));
    case Kind::kCallable:
      if (std::string_view(v.callable().type_name()) == "Macro") {
        return TString(absl::StrCat("<Macro '", v.callable().name(), "'>"));
      }
      return TString(absl::StrCat("<built-in function ", v.callable().name(), ">"));
    case Kind::kLoop:
      return TString(absl::StrCat("<LoopContext ", v.loop().index + 1, "/", v.loop().items.size(), ">"));
    default: {
      TString out;
      ReprInto(v, &out, 0);
      if (out.any_taint()) out.TaintAll();
      return out;
    }
  }
}

TString Repr(const Value& v) {
  TString out;
  ReprInto(v, &out, 0);
  if (out.any_taint()) out.TaintAll();
  return out;
}

bool Equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return NumEqual(a, b);
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      if (a.str().size() == b.str().size()) RenderBudget::Charge(a.str().size());
      return a.str().str() == b.str().str();
    case Kind::kList:
    case Kind::kTuple: {
      const List &x = a.list(), &y = b.list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!Equal(x[i], y[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      const Dict &x = a.dict(), &y = b.dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.items()) {
        const Value* o = y.Find(k);
        if (!o || !Equal(v, *o)) return false;
      }
      return true;
    }
    case Kind::kNamespace:
      return &a.ns() == &b.ns();
    case Kind::kCallable:
      return &a.callable() == &b.callable();
    case Kind::kLoop:
      return &a.loop() == &b.loop();
    default:
      return false;
  }
}

bool Less(const Value& a, const Value& b) {
  if (a.is_undefined()) a.Fail();
  if (b.is_undefined()) b.Fail();
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::kFloat || b.kind() == Kind::kFloat) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str().str() < b.str().str();
  if (a.kind() == b.kind() && a.is_sequence()) {
    const List &x = a.list(), &y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!Equal(x[i], y[i])) return Less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  Throw("TypeError",
        absl::StrCat("'<' not supported between instances of '", TypeName(a), "' and '", TypeName(b), "'"));
}

size_t Length(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return 0;
    case Kind::kString:
      return CodePointCount(v.str().view());
    case Kind::kList:
    case Kind::kTuple:
      return v.list().size();
    case Kind::kDict:
      return v.dict().size();
    default:
      Throw("TypeError", absl::StrCat("object of type '", TypeName(v), "' has no len()"));
  }
}

List Iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return {};
    case Kind::kList:
    case Kind::kTuple:
      RenderBudget::Charge(v.list().size() * sizeof(Value));
      return v.list();
    case Kind::kDict: {
      RenderBudget::Charge(v.dict().size() * sizeof(Value));
      List keys;
      keys.reserve(v.dict().size());
      for (const auto& kv : v.dict().items()) keys.push_back(kv.first);
      return keys;
    }
    case Kind::kString: {
      const TString& s = v.str();
      const std::vector<uint32_t> off = CodePointOffsets(s.view());
      // Each character becomes a string value of its own.
      RenderBudget::Charge((off.size() - 1) * (sizeof(Value) + sizeof(StringObj)));
      List out;
      out.reserve(off.size() - 1);
      for (size_t i = 0; i + 1 < off.size(); ++i) out.push_back(Value::Str(s.Sub(off[i], off[i + 1])));
      return out;
    }
    default:
      Throw("TypeError", absl::StrCat("'", TypeName(v), "' object is not iterable"));
  }
}

bool Contains(const Value& hay, const Value& needle) {
  switch (hay.kind()) {
    case Kind::kString:
      if (!needle.is_string()) {
        if (needle.is_undefined()) needle.Fail();
        Throw("TypeError", absl::StrCat("'in <string>' requires string as left operand, not ", TypeName(needle)));
      }
      RenderBudget::Charge(hay.str().size());
      return hay.str().view().find(needle.str().view()) != std::string_view::npos;
    case Kind::kList:
    case Kind::kTuple:
      RenderBudget::Charge(hay.list().size() * sizeof(Value));
      for (const Value& e : hay.list()) {
        if (Equal(e, needle)) return true;
      }
      return false;
    case Kind::kDict:
      if (needle.kind() == Kind::kList || needle.kind() == Kind::kDict) {
        Throw("TypeError", absl::StrCat("unhashable type: '", TypeName(needle), "'"));
      }
      return hay.dict().Find(needle) != nullptr;
    case Kind::kUndefined:
      return false;
    case Kind::kNamespace:
      Throw("TypeError", "argument of type 'Namespace' is not iterable");
    default:
      Throw("TypeError", absl::StrCat("argument of type '", TypeName(hay), "' is not iterable"));
  }
}

namespace {
// Depth-bounded: a namespace can hold itself.
bool AnyTaintAt(const Value& v, int depth) {
  CheckDepth(depth);
  switch (v.kind()) {
    case Kind::kString:
      return v.str().any_taint();
    case Kind::kList:
    case Kind::kTuple:
      for (const Value& e : v.list()) {
        if (AnyTaintAt(e, depth + 1)) return true;
      }
      return false;
    case Kind::kDict:
      for (const auto& [k, e] : v.dict().items()) {
        if (AnyTaintAt(k, depth + 1) || AnyTaintAt(e, depth + 1)) return true;
      }
      return false;
    case Kind::kNamespace:
      for (const auto& [k, e] : v.ns().attrs.items()) {
        if (AnyTaintAt(e, depth + 1)) return true;
      }
      return false;
    default:
      return false;
  }
}
}  // namespace

bool AnyTaint(const Value& v) { return AnyTaintAt(v, 0); }

TString JsonDumps(const Value& v, const JsonOptions& opt) {
  JsonWriter w{opt, {}, false};
  w.Write(v, 0);
  return TString(std::move(w.out), w.taint);
}

}  // namespace moe::text::jinja
