#include "common/text/jinja/builtins.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/text/jinja/budget.h"
#include "common/text/jinja/interpreter.h"
#include "common/text/jinja/py_str.h"

namespace moe::text::jinja {
namespace {

// ---- argument binding ----

const Value* Arg(const CallArgs& a, size_t i, std::string_view name) {
  if (i < a.pos.size()) return &a.pos[i];
  return a.Kw(name);
}

void CheckArity(const CallArgs& a, std::string_view fn, std::initializer_list<const char*> names) {
  if (a.pos.size() > names.size()) {
    Throw("TypeError", absl::StrCat(std::string(fn), "() takes at most ", names.size(), " argument(s) (", a.pos.size(), " given)"));
  }
  for (const auto& [k, v] : a.kw) {
    bool known = false;
    for (const char* n : names) known |= k == n;
    if (!known) Throw("TypeError", absl::StrCat(std::string(fn), "() got an unexpected keyword argument '", k, "'"));
  }
}

std::string NeedStr(const Value* v, std::string_view what) {
  if (!v || !v->is_string()) {
    if (v && v->is_undefined()) v->Fail();
    Throw("TypeError", absl::StrCat(std::string(what), " must be str, not ", v ? TypeName(*v) : "nothing"));
  }
  return v->str().str();
}

std::optional<std::string> OptStr(const Value* v, std::string_view what) {
  if (!v || v->is_none()) return std::nullopt;
  return NeedStr(v, what);
}

int64_t IntArg(const Value* v, int64_t def, std::string_view what) {
  if (!v || v->is_none()) return def;
  if (v->kind() != Kind::kInt && v->kind() != Kind::kBool) {
    if (v->is_undefined()) v->Fail();
    Throw("TypeError", absl::StrCat(std::string(what), ": '", TypeName(*v), "' object cannot be interpreted as an integer"));
  }
  const Int i = v->as_int();
  return static_cast<int64_t>(std::clamp<Int>(i, INT64_MIN / 4, INT64_MAX / 4));
}

bool BoolArg(const Value* v, bool def) { return v ? v->Truthy() : def; }

TString StrOf(const Value& v) { return ToStr(v); }  // soft_str

Value MakeStrList(std::vector<TString> parts) {
  List out;
  out.reserve(parts.size());
  for (auto& p : parts) out.push_back(Value::Str(std::move(p)));
  return Value::MakeList(std::move(out));
}

// ---- methods ----

Value Unsafe(const Value& obj, std::string_view name) {
  return Value::Undefined(absl::StrCat("access to attribute '", std::string(name), "' of '", TypeName(obj), "' object is unsafe."),
                          "SecurityError");
}

bool PrefixMatch(const TString& s, const Value& p, bool end, int64_t start, int64_t stop) {
  auto one = [&](const Value& x) {
    const std::string pre = NeedStr(&x, end ? "endswith arg" : "startswith arg");
    std::string_view v = s.view();
    if (start != 0 || stop != INT64_MAX) {
      const std::vector<uint32_t> off = CodePointOffsets(v);
      const int64_t n = static_cast<int64_t>(off.size()) - 1;
      int64_t a = start < 0 ? std::max<int64_t>(0, start + n) : std::min(start, n);
      int64_t b = stop < 0 ? std::max<int64_t>(0, stop + n) : std::min(stop, n);
      if (a > b) return false;
      v = v.substr(off[static_cast<size_t>(a)], off[static_cast<size_t>(b)] - off[static_cast<size_t>(a)]);
    }
    if (pre.size() > v.size()) return false;
    return end ? v.substr(v.size() - pre.size()) == pre : v.substr(0, pre.size()) == pre;
  };
  if (p.kind() == Kind::kTuple) {
    for (const Value& x : p.list()) {
      if (one(x)) return true;
    }
    return false;
  }
  return one(p);
}

Value StrMethod(Interpreter& in, const Value& self, const std::string& m, CallArgs& a) {
  const TString& s = self.str();
  if (m == "strip" || m == "lstrip" || m == "rstrip") {
    CheckArity(a, m, {"chars"});
    const py::StripSide side = m == "strip" ? py::StripSide::kBoth : m == "lstrip" ? py::StripSide::kLeft : py::StripSide::kRight;
    return Value::Str(py::Strip(s, OptStr(Arg(a, 0, "chars"), "chars"), side));
  }
  if (m == "split" || m == "rsplit") {
    CheckArity(a, m, {"sep", "maxsplit"});
    return MakeStrList(py::Split(s, OptStr(Arg(a, 0, "sep"), "sep"), IntArg(Arg(a, 1, "maxsplit"), -1, "maxsplit"), m == "rsplit"));
  }
  if (m == "splitlines") {
    CheckArity(a, m, {"keepends"});
    return MakeStrList(py::SplitLines(s, BoolArg(Arg(a, 0, "keepends"), false)));
  }
  if (m == "startswith" || m == "endswith") {
    CheckArity(a, m, {"prefix", "start", "end"});
    const Value* p = Arg(a, 0, "prefix");
    if (!p) Throw("TypeError", absl::StrCat(m, "() takes at least 1 argument (0 given)"));
    return Value::Bool(PrefixMatch(s, *p, m == "endswith", IntArg(Arg(a, 1, "start"), 0, "start"),
                                   IntArg(Arg(a, 2, "end"), INT64_MAX, "end")));
  }
  if (m == "replace") {
    CheckArity(a, m, {"old", "new", "count"});
    const Value* o = Arg(a, 0, "old");
    const Value* n = Arg(a, 1, "new");
    NeedStr(o, "replace() argument 1");
    NeedStr(n, "replace() argument 2");
    return Value::Str(py::Replace(s, o->str(), n->str(), IntArg(Arg(a, 2, "count"), -1, "count")));
  }
  if (m == "upper") return Value::Str(py::Upper(s));
  if (m == "lower" || m == "casefold") return Value::Str(py::Lower(s));
  if (m == "title") return Value::Str(py::Title(s));
  if (m == "capitalize") return Value::Str(py::Capitalize(s));
  if (m == "swapcase") return Value::Str(py::SwapCase(s));
  if (m == "find" || m == "rfind" || m == "index" || m == "rindex") {
    CheckArity(a, m, {"sub", "start", "end"});
    const std::string sub = NeedStr(Arg(a, 0, "sub"), "sub");
    const int64_t r = py::Find(s.view(), sub, IntArg(Arg(a, 1, "start"), 0, "start"),
                               IntArg(Arg(a, 2, "end"), INT64_MAX / 8, "end"), m[0] == 'r');
    if (r < 0 && (m == "index" || m == "rindex")) Throw("ValueError", "substring not found");
    return Value::FromInt(r);
  }
  if (m == "count") {
    CheckArity(a, m, {"sub"});
    return Value::FromInt(py::Count(s.view(), NeedStr(Arg(a, 0, "sub"), "sub")));
  }
  if (m == "join") {
    CheckArity(a, m, {"iterable"});
    const Value* it = Arg(a, 0, "iterable");
    if (!it) Throw("TypeError", "join() takes exactly one argument (0 given)");
    TString out;
    const List items = Iterate(*it);
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        Throw("TypeError", absl::StrCat("sequence item ", i, ": expected str instance, ", TypeName(items[i]), " found"));
      }
      if (i) out.Append(s);
      out.Append(items[i].str());
    }
    return Value::Str(std::move(out));
  }
  if (m == "format") return Value::Str(py::Format(s, a.pos, a.kw));
  if (m == "isdigit" || m == "isnumeric" || m == "isdecimal") return Value::Bool(py::IsDigit(s.view()));
  if (m == "isalpha") return Value::Bool(py::IsAlpha(s.view()));
  if (m == "isalnum") return Value::Bool(py::IsAlnum(s.view()));
  if (m == "isspace") return Value::Bool(py::IsSpace(s.view()));
  if (m == "islower") return Value::Bool(py::IsLower(s.view()));
  if (m == "isupper") return Value::Bool(py::IsUpper(s.view()));
  if (m == "zfill") return Value::Str(py::Pad(s, IntArg(Arg(a, 0, "width"), 0, "width"), "0", 'z'));
  if (m == "center" || m == "ljust" || m == "rjust") {
    CheckArity(a, m, {"width", "fillchar"});
    const std::string fill = OptStr(Arg(a, 1, "fillchar"), "fillchar").value_or(" ");
    return Value::Str(py::Pad(s, IntArg(Arg(a, 0, "width"), 0, "width"), fill, m == "center" ? 'c' : m == "ljust" ? 'l' : 'r'));
  }
  if (m == "removeprefix" || m == "removesuffix") {
    const std::string x = NeedStr(Arg(a, 0, "prefix"), m);
    const std::string_view v = s.view();
    if (m == "removeprefix" && v.substr(0, x.size()) == x) return Value::Str(s.Sub(x.size(), v.size()));
    if (m == "removesuffix" && !x.empty() && v.size() >= x.size() && v.substr(v.size() - x.size()) == x) {
      return Value::Str(s.Sub(0, v.size() - x.size()));
    }
    return self;
  }
  if (m == "partition" || m == "rpartition") {
    const std::string sep = NeedStr(Arg(a, 0, "sep"), m);
    if (sep.empty()) Throw("ValueError", "empty separator");
    const std::string_view v = s.view();
    const size_t f = m == "partition" ? v.find(sep) : v.rfind(sep);
    if (f == std::string_view::npos) {
      return m == "partition" ? Value::MakeTuple({self, Value::Str(""), Value::Str("")})
                              : Value::MakeTuple({Value::Str(""), Value::Str(""), self});
    }
    return Value::MakeTuple({Value::Str(s.Sub(0, f)), Value::Str(s.Sub(f, f + sep.size())),
                             Value::Str(s.Sub(f + sep.size(), v.size()))});
  }
  (void)in;
  Throw("AttributeError", absl::StrCat("'str' object has no attribute '", m, "'"));
}

Value DictMethod(const Value& self, const std::string& m, CallArgs& a) {
  const Dict& d = self.dict();
  if (m == "get") {
    CheckArity(a, m, {"key", "default"});
    const Value* k = Arg(a, 0, "key");
    if (!k) Throw("TypeError", "get expected at least 1 argument, got 0");
    if (const Value* v = d.Find(*k)) return *v;
    const Value* def = Arg(a, 1, "default");
    return def ? *def : Value::None();
  }
  if (m == "items") {
    List out;
    for (const auto& [k, v] : d.items()) out.push_back(Value::MakeTuple({k, v}));
    return Value::MakeList(std::move(out));
  }
  if (m == "keys") {
    List out;
    for (const auto& kv : d.items()) out.push_back(kv.first);
    return Value::MakeList(std::move(out));
  }
  if (m == "values") {
    List out;
    for (const auto& kv : d.items()) out.push_back(kv.second);
    return Value::MakeList(std::move(out));
  }
  if (m == "copy") return self;
  Throw("AttributeError", absl::StrCat("'dict' object has no attribute '", m, "'"));
}

Value SeqMethod(const Value& self, const std::string& m, CallArgs& a) {
  const List& l = self.list();
  if (m == "index") {
    const Value* x = Arg(a, 0, "value");
    if (!x) Throw("TypeError", "index expected at least 1 argument, got 0");
    for (size_t i = 0; i < l.size(); ++i) {
      if (Equal(l[i], *x)) return Value::FromInt(static_cast<Int>(i));
    }
    Throw("ValueError", absl::StrCat(Repr(*x).str(), " is not in list"));
  }
  if (m == "count") {
    const Value* x = Arg(a, 0, "value");
    if (!x) Throw("TypeError", "count() takes exactly one argument (0 given)");
    Int n = 0;
    for (const Value& e : l) n += Equal(e, *x);
    return Value::FromInt(n);
  }
  if (m == "copy") return self;
  Throw("AttributeError", absl::StrCat("'", TypeName(self), "' object has no attribute '", m, "'"));
}

Value LoopMethod(Interpreter& in, const Value& self, const std::string& m, CallArgs& a) {
  LoopState& l = self.loop();
  if (m == "cycle") {
    if (a.pos.empty()) Throw("TypeError", "no items for cycling given");
    return a.pos[l.index % a.pos.size()];
  }
  // changed(*values): true on the first call and whenever the values differ from the last call's.
  const Value cur = Value::MakeList(a.pos);
  const bool changed = !l.has_changed || !Equal(l.last_changed, cur);
  l.last_changed = cur;
  l.has_changed = true;
  (void)in;
  return Value::Bool(changed);
}

const absl::flat_hash_set<std::string_view>& StrMethods() {
  static const auto* s = new absl::flat_hash_set<std::string_view>{
      "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith", "replace", "upper",
      "lower", "casefold", "title", "capitalize", "swapcase", "find", "rfind", "index", "rindex", "count", "join",
      "format", "isdigit", "isnumeric", "isdecimal", "isalpha", "isalnum", "isspace", "islower", "isupper", "zfill",
      "center", "ljust", "rjust", "removeprefix", "removesuffix", "partition", "rpartition"};
  return *s;
}

// ---- filters ----

Value KeyOf(Interpreter& in, const Value& item, const std::optional<std::string>& attribute, bool case_sensitive) {
  Value k = item;
  if (attribute) {
    // Jinja2's make_attrgetter: dotted path, integer parts index.
    size_t start = 0;
    const std::string& path = *attribute;
    while (start <= path.size()) {
      const size_t dot = path.find('.', start);
      const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
      k = numeric ? in.GetItem(k, Value::FromInt(std::stoll(part))) : in.GetItem(k, Value::Str(part));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
  }
  if (!case_sensitive && k.is_string()) return Value::Str(py::Lower(k.str()));
  return k;
}

Value FTojson(Interpreter&, const Value& v, CallArgs& a) {
  CheckArity(a, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = BoolArg(Arg(a, 0, "ensure_ascii"), false);
  const Value* indent = Arg(a, 1, "indent");
  if (indent && !indent->is_none()) {
    if (indent->is_string()) {
      o.indent_is_str = true;
      o.indent_str = indent->str().str();
    } else {
      o.indent = static_cast<int>(std::clamp<int64_t>(IntArg(indent, 0, "indent"), 0, INT32_MAX));
    }
    o.item_sep.assign(1, ',');
  }
  const Value* seps = Arg(a, 2, "separators");
  if (seps && !seps->is_none()) {
    if (!seps->is_sequence() || seps->list().size() != 2) Throw("ValueError", "separators must be a (item, key) pair");
    o.item_sep = NeedStr(&seps->list()[0], "item separator");
    o.key_sep = NeedStr(&seps->list()[1], "key separator");
  }
  o.sort_keys = BoolArg(Arg(a, 3, "sort_keys"), false);
  return Value::Str(JsonDumps(v, o));
}

Value FTrim(Interpreter&, const Value& v, CallArgs& a) {
  CheckArity(a, "trim", {"chars"});
  return Value::Str(py::Strip(StrOf(v), OptStr(Arg(a, 0, "chars"), "chars"), py::StripSide::kBoth));
}

Value FLength(Interpreter&, const Value& v, CallArgs&) { return Value::FromInt(static_cast<Int>(Length(v))); }

Value FFirst(Interpreter&, const Value& v, CallArgs&) {
  List items = Iterate(v);
  if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
  return items.front();
}

Value FLast(Interpreter&, const Value& v, CallArgs&) {
  if (v.kind() != Kind::kList && v.kind() != Kind::kTuple && v.kind() != Kind::kString && v.kind() != Kind::kDict &&
      !v.is_undefined()) {
    Throw("TypeError", absl::StrCat("'", TypeName(v), "' object is not reversible"));
  }
  List items = Iterate(v);
  if (items.empty()) return Value::Undefined("No last item, sequence was empty.");
  return items.back();
}

Value FJoin(Interpreter& in, const Value& v, CallArgs& a) {
  CheckArity(a, "join", {"d", "attribute"});
  const Value* d = Arg(a, 0, "d");
  const TString sep = d ? StrOf(*d) : TString();
  const std::optional<std::string> attr = OptStr(Arg(a, 1, "attribute"), "attribute");
  TString out;
  const List items = Iterate(v);
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out.Append(sep);
    out.Append(StrOf(attr ? KeyOf(in, items[i], attr, true) : items[i]));
  }
  return Value::Str(std::move(out));
}

Value FDefault(Interpreter&, const Value& v, CallArgs& a) {
  CheckArity(a, "default", {"default_value", "boolean"});
  const Value* def = Arg(a, 0, "default_value");
  const bool boolean = BoolArg(Arg(a, 1, "boolean"), false);
  if (v.is_undefined() || (boolean && !v.Truthy())) return def ? *def : Value::Str("");
  return v;
}

Value FString(Interpreter&, const Value& v, CallArgs&) { return Value::Str(StrOf(v)); }
Value FList(Interpreter&, const Value& v, CallArgs&) { return Value::MakeList(Iterate(v)); }

Value FItems(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_undefined()) return Value::MakeList({});
  if (v.kind() != Kind::kDict) Throw("TypeError", "Can only get item pairs from a mapping.");
  List out;
  for (const auto& [k, x] : v.dict().items()) out.push_back(Value::MakeTuple({k, x}));
  return Value::MakeList(std::move(out));
}

Value FLower(Interpreter&, const Value& v, CallArgs&) { return Value::Str(py::Lower(StrOf(v))); }
Value FUpper(Interpreter&, const Value& v, CallArgs&) { return Value::Str(py::Upper(StrOf(v))); }
Value FCapitalize(Interpreter&, const Value& v, CallArgs&) { return Value::Str(py::Capitalize(StrOf(v))); }
Value FTitle(Interpreter&, const Value& v, CallArgs&) { return Value::Str(py::JinjaTitle(StrOf(v))); }

Value FReplace(Interpreter&, const Value& v, CallArgs& a) {
  CheckArity(a, "replace", {"old", "new", "count"});
  const Value* o = Arg(a, 0, "old");
  const Value* n = Arg(a, 1, "new");
  if (!o || !n) Throw("TypeError", "replace() needs old and new");
  return Value::Str(py::Replace(StrOf(v), StrOf(*o), StrOf(*n), IntArg(Arg(a, 2, "count"), -1, "count")));
}

// select/reject/selectattr/rejectattr share this.
Value SelectOrReject(Interpreter& in, const Value& v, CallArgs& a, bool attr, bool select) {
  size_t i = 0;
  std::optional<std::string> attribute;
  if (attr) {
    if (a.pos.empty()) Throw("TypeError", "Missing parameter for attribute name");
    attribute = NeedStr(&a.pos[0], "attribute");
    i = 1;
  }
  std::optional<std::string> test;
  if (i < a.pos.size()) test = NeedStr(&a.pos[i], "test name");
  CallArgs targs;
  for (size_t k = i + 1; k < a.pos.size(); ++k) targs.pos.push_back(a.pos[k]);
  targs.kw = a.kw;
  List out;
  for (const Value& item : Iterate(v)) {
    const Value x = attribute ? KeyOf(in, item, attribute, true) : item;
    CallArgs copy = targs;
    const bool ok = test ? in.ApplyTest(*test, x, copy) : x.Truthy();
    if (ok == select) out.push_back(item);
  }
  return Value::MakeList(std::move(out));
}
Value FSelect(Interpreter& in, const Value& v, CallArgs& a) { return SelectOrReject(in, v, a, false, true); }
Value FReject(Interpreter& in, const Value& v, CallArgs& a) { return SelectOrReject(in, v, a, false, false); }
Value FSelectAttr(Interpreter& in, const Value& v, CallArgs& a) { return SelectOrReject(in, v, a, true, true); }
Value FRejectAttr(Interpreter& in, const Value& v, CallArgs& a) { return SelectOrReject(in, v, a, true, false); }

Value FMap(Interpreter& in, const Value& v, CallArgs& a) {
  List out;
  if (const Value* attr = a.Kw("attribute")) {
    const std::string name = NeedStr(attr, "attribute");
    const Value* def = a.Kw("default");
    for (const Value& item : Iterate(v)) {
      Value x = KeyOf(in, item, name, true);
      if (x.is_undefined() && def) x = *def;
      out.push_back(std::move(x));
    }
    return Value::MakeList(std::move(out));
  }
  if (a.pos.empty()) Throw("TypeError", "map() needs a filter name or attribute=");
  const std::string filter = NeedStr(&a.pos[0], "filter name");
  CallArgs fargs;
  fargs.pos.assign(a.pos.begin() + 1, a.pos.end());
  fargs.kw = a.kw;
  for (const Value& item : Iterate(v)) {
    CallArgs copy = fargs;
    out.push_back(in.ApplyFilter(filter, item, copy));
  }
  return Value::MakeList(std::move(out));
}

Value FUnique(Interpreter& in, const Value& v, CallArgs& a) {
  CheckArity(a, "unique", {"case_sensitive", "attribute"});
  const bool cs = BoolArg(Arg(a, 0, "case_sensitive"), false);
  const std::optional<std::string> attr = OptStr(Arg(a, 1, "attribute"), "attribute");
  List out, seen;
  for (const Value& item : Iterate(v)) {
    const Value k = KeyOf(in, item, attr, cs);
    bool dup = false;
    for (const Value& s : seen) dup |= Equal(s, k);
    if (dup) continue;
    seen.push_back(k);
    out.push_back(item);
  }
  return Value::MakeList(std::move(out));
}

Value FSort(Interpreter& in, const Value& v, CallArgs& a) {
  CheckArity(a, "sort", {"reverse", "case_sensitive", "attribute"});
  const bool reverse = BoolArg(Arg(a, 0, "reverse"), false);
  const bool cs = BoolArg(Arg(a, 1, "case_sensitive"), false);
  const std::optional<std::string> attr = OptStr(Arg(a, 2, "attribute"), "attribute");
  List items = Iterate(v);
  std::vector<std::pair<Value, size_t>> keyed;
  for (size_t i = 0; i < items.size(); ++i) keyed.emplace_back(KeyOf(in, items[i], attr, cs), i);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? Less(y.first, x.first) : Less(x.first, y.first);
  });
  List out;
  for (const auto& [k, i] : keyed) out.push_back(items[i]);
  return Value::MakeList(std::move(out));
}

Value FDictsort(Interpreter& in, const Value& v, CallArgs& a) {
  CheckArity(a, "dictsort", {"case_sensitive", "by", "reverse"});
  if (v.kind() != Kind::kDict) Throw("TypeError", "dictsort needs a mapping");
  const bool cs = BoolArg(Arg(a, 0, "case_sensitive"), false);
  const std::string by = OptStr(Arg(a, 1, "by"), "by").value_or("key");
  const bool reverse = BoolArg(Arg(a, 2, "reverse"), false);
  if (by != "key" && by != "value") Throw("FilterArgumentError", "You can only sort by either \"key\" or \"value\"");
  std::vector<std::pair<Value, Value>> items = v.dict().items();
  std::stable_sort(items.begin(), items.end(), [&](const auto& x, const auto& y) {
    const Value kx = KeyOf(in, by == "key" ? x.first : x.second, std::nullopt, cs);
    const Value ky = KeyOf(in, by == "key" ? y.first : y.second, std::nullopt, cs);
    return reverse ? Less(ky, kx) : Less(kx, ky);
  });
  List out;
  for (auto& [k, x] : items) out.push_back(Value::MakeTuple({k, x}));
  return Value::MakeList(std::move(out));
}

Value FReverse(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_string()) {
    List chars = Iterate(v);
    TString out;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out.Append(it->str());
    return Value::Str(std::move(out));
  }
  List items = Iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::MakeList(std::move(items));
}

Value FInt(Interpreter&, const Value& v, CallArgs& a) {
  CheckArity(a, "int", {"default", "base"});
  const Value* def = Arg(a, 0, "default");
  const Value fallback = def ? *def : Value::FromInt(0);
  const int64_t base = IntArg(Arg(a, 1, "base"), 10, "base");
  switch (v.kind()) {
    case Kind::kInt:
    case Kind::kBool:
      return Value::FromInt(v.as_int());
    case Kind::kFloat:
      if (!std::isfinite(v.as_float())) return fallback;
      return Value::FromInt(static_cast<Int>(std::trunc(v.as_float())));
    case Kind::kString: {
      std::string s = py::Strip(v.str(), std::nullopt, py::StripSide::kBoth).str();
      s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
      if (s.empty()) return fallback;
      char* end = nullptr;
      errno = 0;
      const long long i = std::strtoll(s.c_str(), &end, static_cast<int>(base));
      if (end && *end == '\0' && errno == 0) return Value::FromInt(i);
      const double d = std::strtod(s.c_str(), &end);
      if (end && *end == '\0' && std::isfinite(d)) return Value::FromInt(static_cast<Int>(std::trunc(d)));
      return fallback;
    }
    default:
      return fallback;
  }
}

Value FFloat(Interpreter&, const Value& v, CallArgs& a) {
  CheckArity(a, "float", {"default"});
  const Value* def = Arg(a, 0, "default");
  const Value fallback = def ? *def : Value::Float(0.0);
  if (v.is_number()) return Value::Float(v.as_float());
  if (v.is_string()) {
    const std::string s = py::Strip(v.str(), std::nullopt, py::StripSide::kBoth).str();
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end && *end == '\0') return Value::Float(d);
  }
  return fallback;
}

Value FAbs(Interpreter&, const Value& v, CallArgs&) {
  if (v.kind() == Kind::kFloat) return Value::Float(std::fabs(v.as_float()));
  if (v.kind() == Kind::kInt || v.kind() == Kind::kBool) return Value::FromInt(v.as_int() < 0 ? -v.as_int() : v.as_int());
  v.Defined();
  Throw("TypeError", absl::StrCat("bad operand type for abs(): '", TypeName(v), "'"));
}

Value FRound(Interpreter&, const Value& v, CallArgs& a) {
  CheckArity(a, "round", {"precision", "method"});
  const int64_t p = IntArg(Arg(a, 0, "precision"), 0, "precision");
  const std::string method = OptStr(Arg(a, 1, "method"), "method").value_or("common");
  if (!v.is_number()) Throw("TypeError", absl::StrCat("type ", TypeName(v), " doesn't define __round__ method"));
  const double scale = std::pow(10.0, static_cast<double>(p));
  const double x = v.as_float() * scale;
  double r;
  if (method == "common") {
    r = std::nearbyint(x);  // Python's round(): half to even
  } else if (method == "ceil") {
    r = std::ceil(x);
  } else if (method == "floor") {
    r = std::floor(x);
  } else {
    Throw("FilterArgumentError", "method must be common, ceil or floor");
  }
  return Value::Float(r / scale);
}

Value FSafe(Interpreter&, const Value& v, CallArgs&) { return Value::Str(StrOf(v)); }

Value FEscape(Interpreter&, const Value& v, CallArgs&) {
  const TString s = StrOf(v);
  std::string out;
  for (char c : s.view()) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return Value::Str(TString(std::move(out), s.any_taint()));
}

Value FFormat(Interpreter&, const Value& v, CallArgs& a) {
  if (!a.kw.empty() && !a.pos.empty()) Throw("FilterArgumentError", "can't handle positional and keyword arguments at the same time");
  if (!a.kw.empty()) {
    Dict d;
    for (const auto& [k, x] : a.kw) d.Set(Value::Str(k), x);
    return Value::Str(py::Percent(StrOf(v), Value::MakeDict(std::move(d))));
  }
  return Value::Str(py::Percent(StrOf(v), Value::MakeTuple(a.pos)));
}

Value FIndent(Interpreter&, const Value& v, CallArgs& a) {
  CheckArity(a, "indent", {"width", "first", "blank"});
  const Value* w = Arg(a, 0, "width");
  std::string ind;
  if (w && w->is_string()) {
    ind = w->str().str();
  } else {
    const int64_t n = std::max<int64_t>(0, IntArg(w, 4, "width"));  // ' ' * n: empty when negative
    RenderBudget::Check(static_cast<uint64_t>(n));
    ind.assign(static_cast<size_t>(n), ' ');
  }
  const bool first = BoolArg(Arg(a, 1, "first"), false), blank = BoolArg(Arg(a, 2, "blank"), false);
  TString s = StrOf(v);
  s.Append("\n");
  std::vector<TString> lines = py::SplitLines(s, false);
  TString out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) {
      out.Append("\n");
      if (blank || !lines[i].empty()) out.Append(ind);
    }
    out.Append(lines[i]);
  }
  if (first) {
    TString r(ind);
    r.Append(out);
    return Value::Str(std::move(r));
  }
  return Value::Str(std::move(out));
}

Value FCenter(Interpreter&, const Value& v, CallArgs& a) {
  return Value::Str(py::Pad(StrOf(v), IntArg(Arg(a, 0, "width"), 80, "width"), " ", 'c'));
}

Value FWordcount(Interpreter&, const Value& v, CallArgs&) {
  const TString s = StrOf(v);
  Int n = 0;
  bool in_word = false;
  for (const Value& ch : Iterate(Value::Str(s))) {
    const bool w = py::IsAlnum(ch.str().view()) || ch.str().view() == "_";
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::FromInt(n);
}

Value FTruncate(Interpreter&, const Value& v, CallArgs& a) {
  CheckArity(a, "truncate", {"length", "killwords", "end", "leeway"});
  const TString s = StrOf(v);
  const int64_t length = IntArg(Arg(a, 0, "length"), 255, "length");
  const bool killwords = BoolArg(Arg(a, 1, "killwords"), false);
  const TString end = Arg(a, 2, "end") ? StrOf(*Arg(a, 2, "end")) : TString("...");
  const int64_t leeway = IntArg(Arg(a, 3, "leeway"), 5, "leeway");
  const int64_t n = static_cast<int64_t>(CodePointCount(s.view()));
  const int64_t elen = static_cast<int64_t>(CodePointCount(end.view()));
  if (length < elen) Throw("AssertionError", absl::StrCat("expected length >= ", elen, ", got ", length));
  if (n <= length + leeway) return Value::Str(s);
  const std::vector<uint32_t> off = CodePointOffsets(s.view());
  TString head = s.Sub(0, off[static_cast<size_t>(length - elen)]);
  if (!killwords) head = py::Split(head, std::string(" "), 1, true)[0];
  head.Append(end);
  return Value::Str(std::move(head));
}

Value FSum(Interpreter& in, const Value& v, CallArgs& a) {
  CheckArity(a, "sum", {"attribute", "start"});
  const std::optional<std::string> attr = OptStr(Arg(a, 0, "attribute"), "attribute");
  const Value* start = Arg(a, 1, "start");
  Value acc = start ? *start : Value::FromInt(0);
  for (const Value& item : Iterate(v)) {
    const Value x = attr ? KeyOf(in, item, attr, true) : item;
    if (!acc.is_number() || !x.is_number()) Throw("TypeError", "sum() needs numbers");
    acc = (acc.kind() == Kind::kFloat || x.kind() == Kind::kFloat) ? Value::Float(acc.as_float() + x.as_float())
                                                                   : Value::FromInt(acc.as_int() + x.as_int());
  }
  return acc;
}

Value MinMax(Interpreter& in, const Value& v, CallArgs& a, bool max) {
  CheckArity(a, max ? "max" : "min", {"case_sensitive", "attribute"});
  const bool cs = BoolArg(Arg(a, 0, "case_sensitive"), false);
  const std::optional<std::string> attr = OptStr(Arg(a, 1, "attribute"), "attribute");
  const List items = Iterate(v);
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value bk = KeyOf(in, items[0], attr, cs);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = KeyOf(in, items[i], attr, cs);
    if (max ? Less(bk, k) : Less(k, bk)) {
      best = i;
      bk = std::move(k);
    }
  }
  return items[best];
}
Value FMin(Interpreter& in, const Value& v, CallArgs& a) { return MinMax(in, v, a, false); }
Value FMax(Interpreter& in, const Value& v, CallArgs& a) { return MinMax(in, v, a, true); }

Value FBatch(Interpreter&, const Value& v, CallArgs& a) {
  const int64_t n = IntArg(Arg(a, 0, "linecount"), 1, "linecount");
  if (n <= 0) Throw("ValueError", "batch size must be positive");
  const Value* fill = Arg(a, 1, "fill_with");
  List out, cur;
  for (const Value& item : Iterate(v)) {
    cur.push_back(item);
    if (static_cast<int64_t>(cur.size()) == n) {
      out.push_back(Value::MakeList(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (fill && !fill->is_none()) {
      RenderBudget::Check(static_cast<uint64_t>(n - static_cast<int64_t>(cur.size())) * sizeof(Value));
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(*fill);
    }
    out.push_back(Value::MakeList(std::move(cur)));
  }
  return Value::MakeList(std::move(out));
}

Value FAttr(Interpreter& in, const Value& v, CallArgs& a) {
  const std::string name = NeedStr(Arg(a, 0, "name"), "attribute name");
  Value m;
  if (FindMethod(v, name, &m)) return m;
  if (v.kind() == Kind::kNamespace || v.kind() == Kind::kLoop) return in.GetAttr(v, name);
  return Value::Undefined(absl::StrCat("'", TypeName(v), " object' has no attribute '", name, "'"));
}

const absl::flat_hash_map<std::string_view, FilterFn>& Filters() {
  static const auto* m = new absl::flat_hash_map<std::string_view, FilterFn>{
      {"tojson", FTojson},       {"trim", FTrim},          {"length", FLength},        {"count", FLength},
      {"first", FFirst},         {"last", FLast},          {"join", FJoin},            {"default", FDefault},
      {"d", FDefault},           {"string", FString},      {"list", FList},            {"items", FItems},
      {"lower", FLower},         {"upper", FUpper},        {"capitalize", FCapitalize}, {"title", FTitle},
      {"replace", FReplace},     {"select", FSelect},      {"reject", FReject},        {"selectattr", FSelectAttr},
      {"rejectattr", FRejectAttr}, {"map", FMap},          {"unique", FUnique},        {"sort", FSort},
      {"dictsort", FDictsort},   {"reverse", FReverse},    {"int", FInt},              {"float", FFloat},
      {"abs", FAbs},             {"round", FRound},        {"safe", FSafe},            {"escape", FEscape},
      {"e", FEscape},            {"forceescape", FEscape}, {"format", FFormat},        {"indent", FIndent},
      {"center", FCenter},       {"wordcount", FWordcount}, {"truncate", FTruncate},   {"sum", FSum},
      {"min", FMin},             {"max", FMax},            {"batch", FBatch},          {"attr", FAttr},
  };
  return *m;
}

// ---- tests ----

bool TDefined(Interpreter&, const Value& v, CallArgs&) { return !v.is_undefined(); }
bool TUndefined(Interpreter&, const Value& v, CallArgs&) { return v.is_undefined(); }
bool TNone(Interpreter&, const Value& v, CallArgs&) { return v.is_none(); }
bool TBoolean(Interpreter&, const Value& v, CallArgs&) { return v.kind() == Kind::kBool; }
bool TFalse(Interpreter&, const Value& v, CallArgs&) { return v.kind() == Kind::kBool && !v.as_bool(); }
bool TTrue(Interpreter&, const Value& v, CallArgs&) { return v.kind() == Kind::kBool && v.as_bool(); }
bool TInteger(Interpreter&, const Value& v, CallArgs&) { return v.kind() == Kind::kInt; }
bool TFloat(Interpreter&, const Value& v, CallArgs&) { return v.kind() == Kind::kFloat; }
bool TNumber(Interpreter&, const Value& v, CallArgs&) { return v.is_number(); }
bool TIsString(Interpreter&, const Value& v, CallArgs&) { return v.is_string(); }
bool TMapping(Interpreter&, const Value& v, CallArgs&) { return v.kind() == Kind::kDict; }
bool TIterable(Interpreter&, const Value& v, CallArgs&) {
  switch (v.kind()) {
    case Kind::kUndefined: case Kind::kString: case Kind::kList: case Kind::kTuple: case Kind::kDict: case Kind::kLoop:
      return true;
    default:
      return false;
  }
}
bool TSequence(Interpreter&, const Value& v, CallArgs&) {
  switch (v.kind()) {
    case Kind::kUndefined: case Kind::kString: case Kind::kList: case Kind::kTuple: case Kind::kDict:
      return true;
    default:
      return false;
  }
}
bool TCallable(Interpreter&, const Value& v, CallArgs&) { return v.kind() == Kind::kCallable; }
const Value& Other(const CallArgs& a, const char* test) {
  const Value* o = Arg(a, 0, "other");
  if (!o) Throw("TypeError", absl::StrCat(test, "() missing 1 required positional argument: 'other'"));
  return *o;
}
bool TEq(Interpreter&, const Value& v, CallArgs& a) { return Equal(v, Other(a, "eq")); }
bool TNe(Interpreter&, const Value& v, CallArgs& a) { return !Equal(v, Other(a, "ne")); }
bool TLt(Interpreter&, const Value& v, CallArgs& a) { return Less(v, Other(a, "lt")); }
bool TLe(Interpreter&, const Value& v, CallArgs& a) { return !Less(Other(a, "le"), v); }
bool TGt(Interpreter&, const Value& v, CallArgs& a) { return Less(Other(a, "gt"), v); }
bool TGe(Interpreter&, const Value& v, CallArgs& a) { return !Less(v, Other(a, "ge")); }
bool TIn(Interpreter&, const Value& v, CallArgs& a) { return Contains(Other(a, "in"), v); }
bool TSameAs(Interpreter&, const Value& v, CallArgs& a) {
  const Value& o = Other(a, "sameas");
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Kind::kNone: case Kind::kUndefined: return true;
    case Kind::kBool: return v.as_bool() == o.as_bool();
    case Kind::kInt: return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;  // CPython's small ints
    default: return Equal(v, o) && (v.kind() == Kind::kNamespace || v.kind() == Kind::kCallable);
  }
}
bool TOdd(Interpreter&, const Value& v, CallArgs&) { return (v.Defined().as_int() % 2) != 0; }
bool TEven(Interpreter&, const Value& v, CallArgs&) { return (v.Defined().as_int() % 2) == 0; }
bool TDivisibleBy(Interpreter&, const Value& v, CallArgs& a) {
  const Int n = IntArg(Arg(a, 0, "num"), 1, "num");
  if (n == 0) Throw("ZeroDivisionError", "integer division or modulo by zero");
  return v.Defined().as_int() % n == 0;
}
bool TLower(Interpreter&, const Value& v, CallArgs&) { return py::IsLower(StrOf(v).view()); }
bool TUpper(Interpreter&, const Value& v, CallArgs&) { return py::IsUpper(StrOf(v).view()); }
bool TEscaped(Interpreter&, const Value&, CallArgs&) { return false; }
bool TFilter(Interpreter&, const Value& v, CallArgs&) { return v.is_string() && FindFilter(v.str().view()) != nullptr; }
bool TTest(Interpreter&, const Value& v, CallArgs&) { return v.is_string() && FindTest(v.str().view()) != nullptr; }

const absl::flat_hash_map<std::string_view, TestFn>& Tests() {
  static const auto* m = new absl::flat_hash_map<std::string_view, TestFn>{
      {"defined", TDefined},   {"undefined", TUndefined}, {"none", TNone},         {"boolean", TBoolean},
      {"false", TFalse},       {"true", TTrue},           {"integer", TInteger},   {"float", TFloat},
      {"number", TNumber},     {"string", TIsString},       {"mapping", TMapping},   {"iterable", TIterable},
      {"sequence", TSequence}, {"callable", TCallable},   {"eq", TEq},             {"equalto", TEq},
      {"==", TEq},             {"ne", TNe},               {"!=", TNe},             {"lt", TLt},
      {"lessthan", TLt},       {"<", TLt},                {"le", TLe},             {"<=", TLe},
      {"gt", TGt},             {"greaterthan", TGt},      {">", TGt},              {"ge", TGe},
      {">=", TGe},             {"in", TIn},               {"sameas", TSameAs},     {"odd", TOdd},
      {"even", TEven},         {"divisibleby", TDivisibleBy}, {"lower", TLower},   {"upper", TUpper},
      {"escaped", TEscaped},   {"filter", TFilter},       {"test", TTest},
  };
  return *m;
}

// ---- globals ----

Value GRange(Interpreter&, CallArgs& a) {
  if (!a.kw.empty()) Throw("TypeError", "range() takes no keyword arguments");
  if (a.pos.empty() || a.pos.size() > 3) Throw("TypeError", absl::StrCat("range expected 1 to 3 arguments, got ", a.pos.size()));
  int64_t start = 0, stop, step = 1;
  if (a.pos.size() == 1) {
    stop = IntArg(&a.pos[0], 0, "range");
  } else {
    start = IntArg(&a.pos[0], 0, "range");
    stop = IntArg(&a.pos[1], 0, "range");
    if (a.pos.size() == 3) step = IntArg(&a.pos[2], 1, "range");
  }
  if (step == 0) Throw("ValueError", "range() arg 3 must not be zero");
  const int64_t n = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                             : (start > stop ? (start - stop - step - 1) / -step : 0);
  if (n > 100000) Throw("OverflowError", "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  List out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.push_back(Value::FromInt(start + i * step));
  return Value::MakeList(std::move(out));
}

void CheckNsName(const std::string& k) {
  if (!k.empty() && k[0] == '_') {
    Throw("SecurityError", absl::StrCat("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '",
                                        k, "'. Please rename the attribute."));
  }
}

void MergeMapping(const Value& src, Dict* d, const char* fn) {
  if (src.kind() == Kind::kDict) {
    for (const auto& [k, v] : src.dict().items()) d->Set(k, v);
    return;
  }
  for (const Value& pair : Iterate(src)) {
    if (!pair.is_sequence() || pair.list().size() != 2) {
      Throw("TypeError", absl::StrCat(fn, ": cannot convert sequence element to a (key, value) pair"));
    }
    d->Set(pair.list()[0], pair.list()[1]);
  }
}

Value GNamespace(Interpreter& in, CallArgs& a) {
  auto* ns = new Namespace();
  const Value v = Value::MakeNamespace(ns);
  in.Track(v);
  if (a.pos.size() > 1) Throw("TypeError", "namespace expected at most 1 positional argument");
  if (!a.pos.empty()) MergeMapping(a.pos[0], &ns->attrs, "namespace");
  for (const auto& [k, v] : ns->attrs.items()) {
    if (k.is_string()) CheckNsName(k.str().str());
  }
  for (const auto& [k, x] : a.kw) {
    CheckNsName(k);
    ns->attrs.Set(Value::Str(k), x);
  }
  return v;
}

Value GDict(Interpreter&, CallArgs& a) {
  Dict d;
  if (a.pos.size() > 1) Throw("TypeError", "dict expected at most 1 argument");
  if (!a.pos.empty()) MergeMapping(a.pos[0], &d, "dict");
  for (const auto& [k, v] : a.kw) d.Set(Value::Str(k), v);
  return Value::MakeDict(std::move(d));
}

Value GRaise(Interpreter&, CallArgs& a) {
  const Value* m = Arg(a, 0, "message");
  Throw("TemplateError", m ? StrOf(*m).str() : std::string());
}

Value GStrftime(Interpreter& in, CallArgs& a) {
  const std::string fmt = NeedStr(Arg(a, 0, "format"), "strftime_now() argument");
  return Value::Str(in.Strftime(fmt));
}

Value GJoiner(Interpreter&, CallArgs& a) {
  const Value* s = Arg(a, 0, "sep");
  const TString sep = s ? StrOf(*s) : TString(", ");
  auto used = std::make_shared<bool>(false);
  return Value::MakeCallable(new NativeCallable("joiner", [sep, used](Interpreter&, CallArgs&) {
    if (!*used) {
      *used = true;
      return Value::Str("");
    }
    return Value::Str(sep);
  }));
}

}  // namespace

const FilterFn* FindFilter(std::string_view name) {
  auto it = Filters().find(name);
  return it == Filters().end() ? nullptr : &it->second;
}

const TestFn* FindTest(std::string_view name) {
  auto it = Tests().find(name);
  return it == Tests().end() ? nullptr : &it->second;
}

namespace {

// Short fixed lists: a scan is cheaper than hashing on every `message.content`.
template <size_t N>
struct Names {
  std::string_view names[N];
  bool contains(std::string_view n) const {
    for (std::string_view x : names) {
      if (x == n) return true;
    }
    return false;
  }
};
constexpr Names<5> kDictMethods{{"get", "items", "keys", "values", "copy"}};
constexpr Names<5> kDictUnsafe{{"clear", "pop", "popitem", "setdefault", "update"}};
constexpr Names<3> kListMethods{{"index", "count", "copy"}};
constexpr Names<8> kListUnsafe{{"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"}};

}  // namespace

bool CallMethod(Interpreter& in, const Value& obj, std::string_view name, CallArgs& args, Value* out) {
  const std::string m(name);
  switch (obj.kind()) {
    case Kind::kString:
      if (!StrMethods().contains(name)) return false;
      *out = StrMethod(in, obj, m, args);
      return true;
    case Kind::kDict:
      if (kDictUnsafe.contains(name)) Unsafe(obj, name).Fail();
      if (!kDictMethods.contains(name)) return false;
      *out = DictMethod(obj, m, args);
      return true;
    case Kind::kList:
    case Kind::kTuple:
      if (obj.kind() == Kind::kList && kListUnsafe.contains(name)) Unsafe(obj, name).Fail();
      if (!kListMethods.contains(name) || (obj.kind() == Kind::kTuple && name == "copy")) return false;
      *out = SeqMethod(obj, m, args);
      return true;
    case Kind::kLoop:
      if (name != "cycle" && name != "changed") return false;
      *out = LoopMethod(in, obj, m, args);
      return true;
    default:
      return false;
  }
}

bool FindMethod(const Value& obj, std::string_view name, Value* out) {
  const auto& kDict = kDictMethods;
  const auto& kList = kListMethods;
  const std::string m(name);
  const Value self = obj;
  switch (obj.kind()) {
    case Kind::kString:
      if (!StrMethods().contains(name)) return false;
      *out = Value::MakeCallable(
          new NativeCallable(m, [self, m](Interpreter& in, CallArgs& a) { return StrMethod(in, self, m, a); }));
      return true;
    case Kind::kDict:
      if (kDictUnsafe.contains(name)) {
        *out = Unsafe(obj, name);
        return true;
      }
      if (!kDict.contains(name)) return false;
      *out = Value::MakeCallable(
          new NativeCallable(m, [self, m](Interpreter&, CallArgs& a) { return DictMethod(self, m, a); }));
      return true;
    case Kind::kList:
    case Kind::kTuple:
      if (obj.kind() == Kind::kList && kListUnsafe.contains(name)) {
        *out = Unsafe(obj, name);
        return true;
      }
      if (!kList.contains(name) || (obj.kind() == Kind::kTuple && name == "copy")) return false;
      *out = Value::MakeCallable(
          new NativeCallable(m, [self, m](Interpreter&, CallArgs& a) { return SeqMethod(self, m, a); }));
      return true;
    case Kind::kLoop:
      if (name != "cycle" && name != "changed") return false;
      *out = Value::MakeCallable(new NativeCallable(
          m, [self, m](Interpreter& in, CallArgs& a) { return LoopMethod(in, self, m, a); }));
      return true;
    default:
      return false;
  }
}

bool FindGlobal(std::string_view name, Value* out) {
  // Immortal: every render on every thread shares them.
  auto global = [](const char* n, NativeCallable::Fn fn) {
    Value v = Value::MakeCallable(new NativeCallable(n, std::move(fn)));
    v.Immortalize();
    return v;
  };
  static const auto* m = new absl::flat_hash_map<std::string_view, Value>{
      {"range", global("range", GRange)},
      {"namespace", global("namespace", GNamespace)},
      {"dict", global("dict", GDict)},
      {"raise_exception", global("raise_exception", GRaise)},
      {"strftime_now", global("strftime_now", GStrftime)},
      {"joiner", global("joiner", GJoiner)},
  };
  auto it = m->find(name);
  if (it == m->end()) return false;
  *out = it->second;
  return true;
}

}  // namespace moe::text::jinja
