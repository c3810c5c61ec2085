#include "common/text/jinja/py_str.h"

#include <unicode/uchar.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/text/jinja/budget.h"
#include "common/text/utf8.h"

namespace moe::text::jinja::py {
namespace {

std::vector<int32_t> CodePoints(std::string_view s) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < s.size();) {
    int32_t cp;
    const int n = DecodeUtf8(s, i, &cp);
    out.push_back(cp < 0 ? 0xFFFD : cp);
    i += static_cast<size_t>(n);
  }
  return out;
}

int32_t CpAt(std::string_view s, size_t i) {
  int32_t cp;
  DecodeUtf8(s, i, &cp);
  return cp < 0 ? 0xFFFD : cp;
}

// ICU full case mapping of a UTF-8 string; kind: 'u' upper, 'l' lower.
std::string IcuCase(std::string_view s, char kind) {
  if (s.empty()) return std::string();
  UErrorCode err = U_ZERO_ERROR;
  int32_t n16 = 0;
  u_strFromUTF8(nullptr, 0, &n16, s.data(), static_cast<int32_t>(s.size()), &err);
  err = U_ZERO_ERROR;
  std::u16string in(static_cast<size_t>(n16), u'\0');
  u_strFromUTF8(reinterpret_cast<UChar*>(in.data()), n16, nullptr, s.data(), static_cast<int32_t>(s.size()), &err);
  std::u16string out(in.size() * 3 + 4, u'\0');
  err = U_ZERO_ERROR;
  const int32_t m = kind == 'u' ? u_strToUpper(reinterpret_cast<UChar*>(out.data()), static_cast<int32_t>(out.size()),
                                               reinterpret_cast<const UChar*>(in.data()), n16, "", &err)
                                : u_strToLower(reinterpret_cast<UChar*>(out.data()), static_cast<int32_t>(out.size()),
                                               reinterpret_cast<const UChar*>(in.data()), n16, "", &err);
  if (U_FAILURE(err)) return std::string(s);
  std::string r(static_cast<size_t>(m) * 3 + 4, '\0');
  int32_t n8 = 0;
  err = U_ZERO_ERROR;
  u_strToUTF8(r.data(), static_cast<int32_t>(r.size()), &n8, reinterpret_cast<const UChar*>(out.data()), m, &err);
  if (U_FAILURE(err)) return std::string(s);
  r.resize(static_cast<size_t>(n8));
  return r;
}

std::string Cp(int32_t cp) {
  std::string s;
  AppendUtf8(&s, static_cast<uint32_t>(cp));
  return s;
}

TString Derived(std::string s, const TString& from) { return TString(std::move(s), from.any_taint()); }

bool InSet(int32_t cp, const std::vector<int32_t>& set) { return std::find(set.begin(), set.end(), cp) != set.end(); }

bool IsLineBreak(int32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
         c == 0x2028 || c == 0x2029;
}

int64_t CpIndexOfByte(const std::vector<uint32_t>& off, size_t b) {
  return std::lower_bound(off.begin(), off.end(), static_cast<uint32_t>(b)) - off.begin();
}

template <typename Pred>
bool AllCp(std::string_view s, Pred p) {
  if (s.empty()) return false;
  for (int32_t c : CodePoints(s)) {
    if (!p(c)) return false;
  }
  return true;
}

bool HasCased(std::string_view s, bool want_lower) {
  bool cased = false;
  for (int32_t c : CodePoints(s)) {
    if (u_isUUppercase(c) || u_istitle(c)) {
      if (want_lower) return false;
      cased = true;
    } else if (u_isULowercase(c)) {
      if (!want_lower) return false;
      cased = true;
    }
  }
  return cased;
}

}  // namespace

TString Strip(const TString& s, const std::optional<std::string>& chars, StripSide side) {
  const std::string_view v = s.view();
  const std::vector<int32_t> set = chars ? CodePoints(*chars) : std::vector<int32_t>{};
  auto strip = [&](int32_t c) { return chars ? InSet(c, set) : PyIsSpace(c); };
  size_t a = 0, b = v.size();
  if (side != StripSide::kRight) {
    while (a < b) {
      int32_t cp;
      const int n = DecodeUtf8(v, a, &cp);
      if (!strip(cp < 0 ? 0xFFFD : cp)) break;
      a += static_cast<size_t>(n);
    }
  }
  if (side != StripSide::kLeft) {
    while (b > a) {
      size_t st = b - 1;
      while (st > a && (static_cast<unsigned char>(v[st]) & 0xC0) == 0x80) --st;
      if (!strip(CpAt(v, st))) break;
      b = st;
    }
  }
  return s.Sub(a, b);
}

std::vector<TString> Split(const TString& s, const std::optional<std::string>& sep, int64_t maxsplit, bool from_right) {
  std::vector<TString> out;
  const std::string_view v = s.view();
  if (sep) {
    if (sep->empty()) Throw("ValueError", "empty separator");
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
        const size_t f = v.find(*sep, pos);
        if (f == std::string_view::npos) break;
        out.push_back(s.Sub(pos, f));
        pos = f + sep->size();
      }
      out.push_back(s.Sub(pos, v.size()));
      return out;
    }
    size_t end = v.size();
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      const size_t f = v.rfind(*sep, end - sep->size());
      if (f == std::string_view::npos) break;
      out.push_back(s.Sub(f + sep->size(), end));
      end = f;
    }
    out.push_back(s.Sub(0, end));
    std::reverse(out.begin(), out.end());
    return out;
  }
  // Whitespace runs.
  const std::vector<uint32_t> off = CodePointOffsets(v);
  const size_t n = off.size() - 1;
  auto ws = [&](size_t i) { return PyIsSpace(CpAt(v, off[i])); };
  if (!from_right) {
    size_t i = 0;
    while (true) {
      while (i < n && ws(i)) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
        out.push_back(s.Sub(off[i], v.size()));
        break;
      }
      size_t j = i;
      while (j < n && !ws(j)) ++j;
      out.push_back(s.Sub(off[i], off[j]));
      i = j;
    }
    return out;
  }
  int64_t i = static_cast<int64_t>(n) - 1;
  while (true) {
    while (i >= 0 && ws(static_cast<size_t>(i))) --i;
    if (i < 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      out.push_back(s.Sub(0, off[static_cast<size_t>(i) + 1]));
      break;
    }
    int64_t j = i;
    while (j >= 0 && !ws(static_cast<size_t>(j))) --j;
    out.push_back(s.Sub(off[static_cast<size_t>(j + 1)], off[static_cast<size_t>(i) + 1]));
    i = j;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<TString> SplitLines(const TString& s, bool keepends) {
  std::vector<TString> out;
  const std::string_view v = s.view();
  size_t start = 0, i = 0;
  while (i < v.size()) {
    int32_t cp;
    const int n = DecodeUtf8(v, i, &cp);
    if (IsLineBreak(cp)) {
      size_t end = i + static_cast<size_t>(n);
      if (cp == '\r' && end < v.size() && v[end] == '\n') ++end;
      out.push_back(s.Sub(start, keepends ? end : i));
      start = i = end;
      continue;
    }
    i += static_cast<size_t>(n);
  }
  if (start < v.size()) out.push_back(s.Sub(start, v.size()));
  return out;
}

TString Replace(const TString& s, const TString& old, const TString& repl, int64_t count) {
  const std::string_view v = s.view();
  TString out;
  if (old.empty()) {
    const std::vector<uint32_t> off = CodePointOffsets(v);
    int64_t done = 0;
    for (size_t i = 0; i + 1 < off.size(); ++i) {
      if (count < 0 || done < count) {
        out.Append(repl);
        ++done;
      }
      out.Append(s.Sub(off[i], off[i + 1]));
    }
    if (count < 0 || done < count) out.Append(repl);
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t f = v.find(old.view(), pos);
    if (f == std::string_view::npos) break;
    out.Append(s.Sub(pos, f));
    out.Append(repl);
    pos = f + old.size();
    ++done;
  }
  out.Append(s.Sub(pos, v.size()));
  return out;
}

int64_t Find(std::string_view s, std::string_view sub, int64_t start, int64_t end, bool from_right) {
  const std::vector<uint32_t> off = CodePointOffsets(s);
  const int64_t n = static_cast<int64_t>(off.size()) - 1;
  if (start < 0) start = std::max<int64_t>(0, start + n);
  if (end < 0) end = std::max<int64_t>(0, end + n);
  if (end > n) end = n;
  if (start > end) return -1;
  const std::string_view win = s.substr(off[static_cast<size_t>(start)], off[static_cast<size_t>(end)] - off[static_cast<size_t>(start)]);
  const size_t f = from_right ? win.rfind(sub) : win.find(sub);
  if (f == std::string_view::npos) return -1;
  return CpIndexOfByte(off, f + off[static_cast<size_t>(start)]);
}

int64_t Count(std::string_view s, std::string_view sub) {
  RenderBudget::Charge(s.size());
  if (sub.empty()) return static_cast<int64_t>(CodePointCount(s)) + 1;
  int64_t n = 0;
  for (size_t p = s.find(sub); p != std::string_view::npos; p = s.find(sub, p + sub.size())) ++n;
  return n;
}

TString Upper(const TString& s) { return Derived(IcuCase(s.view(), 'u'), s); }
TString Lower(const TString& s) { return Derived(IcuCase(s.view(), 'l'), s); }

TString SwapCase(const TString& s) {
  std::string out;
  for (int32_t c : CodePoints(s.view())) {
    if (u_isUUppercase(c)) {
      out += IcuCase(Cp(c), 'l');
    } else if (u_isULowercase(c)) {
      out += IcuCase(Cp(c), 'u');
    } else {
      AppendUtf8(&out, static_cast<uint32_t>(c));
    }
  }
  return Derived(std::move(out), s);
}

TString Title(const TString& s) {
  std::string out;
  bool prev_cased = false;
  for (int32_t c : CodePoints(s.view())) {
    if (prev_cased) {
      out += IcuCase(Cp(c), 'l');
    } else {
      AppendUtf8(&out, static_cast<uint32_t>(u_totitle(c)));
    }
    prev_cased = u_hasBinaryProperty(c, UCHAR_CASED);
  }
  return Derived(std::move(out), s);
}

TString Capitalize(const TString& s) {
  const std::vector<int32_t> cps = CodePoints(s.view());
  if (cps.empty()) return s;
  std::string out;
  AppendUtf8(&out, static_cast<uint32_t>(u_totitle(cps[0])));
  std::string rest;
  for (size_t i = 1; i < cps.size(); ++i) AppendUtf8(&rest, static_cast<uint32_t>(cps[i]));
  out += IcuCase(rest, 'l');
  return Derived(std::move(out), s);
}

TString JinjaTitle(const TString& s) {
  // re.split(r"([-\s({\[<]+)") keeps the separators; each non-empty piece -> p[0].upper() + p[1:].lower().
  std::string out;
  const std::vector<int32_t> cps = CodePoints(s.view());
  auto is_sep = [](int32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || PyIsSpace(c); };
  size_t i = 0;
  while (i < cps.size()) {
    size_t j = i;
    const bool sep = is_sep(cps[i]);
    while (j < cps.size() && is_sep(cps[j]) == sep) ++j;
    std::string piece;
    for (size_t k = i; k < j; ++k) AppendUtf8(&piece, static_cast<uint32_t>(cps[k]));
    if (sep) {
      out += piece;
    } else {
      out += IcuCase(Cp(cps[i]), 'u');
      std::string rest;
      for (size_t k = i + 1; k < j; ++k) AppendUtf8(&rest, static_cast<uint32_t>(cps[k]));
      out += IcuCase(rest, 'l');
    }
    i = j;
  }
  return Derived(std::move(out), s);
}

bool IsDigit(std::string_view s) {
  return AllCp(s, [](int32_t c) {
    const int32_t t = u_getIntPropertyValue(c, UCHAR_NUMERIC_TYPE);
    return t == U_NT_DIGIT || t == U_NT_DECIMAL;
  });
}
bool IsAlpha(std::string_view s) { return AllCp(s, [](int32_t c) { return u_isalpha(c) != 0; }); }
bool IsAlnum(std::string_view s) { return AllCp(s, [](int32_t c) { return u_isalnum(c) != 0; }); }
bool IsSpace(std::string_view s) { return AllCp(s, [](int32_t c) { return PyIsSpace(c); }); }
bool IsLower(std::string_view s) { return HasCased(s, true); }
bool IsUpper(std::string_view s) { return HasCased(s, false); }

TString Pad(const TString& s, int64_t width, const std::string& fill, char how) {
  const int64_t len = static_cast<int64_t>(CodePointCount(s.view()));
  if (width <= len) return s;
  const int64_t total = width - len;
  RenderBudget::Check(static_cast<uint64_t>(total) * fill.size());
  TString out;
  auto filln = [&](int64_t n) {
    std::string f;
    for (int64_t i = 0; i < n; ++i) f += fill;
    out.Append(f);
  };
  switch (how) {
    case 'l':
      out.Append(s);
      filln(total);
      break;
    case 'r':
      filln(total);
      out.Append(s);
      break;
    case 'z': {
      const std::string_view v = s.view();
      size_t sign = (!v.empty() && (v[0] == '+' || v[0] == '-')) ? 1 : 0;
      out.Append(s.Sub(0, sign));
      filln(total);
      out.Append(s.Sub(sign, v.size()));
      break;
    }
    default: {
      // Python's center: left = total/2 + (total & width & 1)
      const int64_t left = total / 2 + (total & width & 1);
      filln(left);
      out.Append(s);
      filln(total - left);
    }
  }
  return out;
}

namespace {

struct Spec {
  std::string fill = " ";
  char align = 0;
  char sign = '-';
  bool alt = false;
  bool zero = false;
  int64_t width = -1;
  int64_t precision = -1;
  char type = 0;
};

// One more digit of a width or precision (-1: none yet). Saturates: a width past the work
// budget is refused where it is used, and no digit string overflows the count.
int64_t Digit(int64_t n, char c) { return std::min<int64_t>(std::max<int64_t>(n, 0) * 10 + (c - '0'), int64_t{1} << 40); }

std::string FormatNumber(const Value& v, const Spec& sp) {
  char type = sp.type;
  if (type == 0) type = v.kind() == Kind::kFloat ? 'r' : 'd';
  std::string body;
  bool neg = false;
  if (type == 'd' || type == 'i' || type == 'u') {
    if (v.kind() == Kind::kFloat) {
      const double d = v.as_float();
      if (!std::isfinite(d)) Throw("OverflowError", "cannot convert float infinity or NaN to integer");
      body = PyIntRepr(static_cast<Int>(std::trunc(d)));
    } else {
      body = PyIntRepr(v.as_int());
    }
  } else if (type == 'x' || type == 'X' || type == 'o' || type == 'b') {
    Int i = v.as_int();
    neg = i < 0;
    unsigned __int128 u = neg ? static_cast<unsigned __int128>(-i) : static_cast<unsigned __int128>(i);
    const int base = type == 'o' ? 8 : type == 'b' ? 2 : 16;
    const char* digits = type == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
    if (u == 0) body = "0";
    while (u) {
      body.push_back(digits[static_cast<int>(u % base)]);
      u /= base;
    }
    std::reverse(body.begin(), body.end());
    if (sp.alt) body = (type == 'o' ? "0o" : type == 'b' ? "0b" : (type == 'X' ? "0X" : "0x")) + body;
    if (neg) body = "-" + body;
  } else if (type == 'r') {
    body = PyFloatRepr(v.as_float());
  } else {
    const char t = (type == 'F' || type == 'f' || type == 'e' || type == 'E' || type == 'g' || type == 'G') ? type : 'f';
    // Any precision (Python prints every digit asked for), within the work budget.
    if (sp.precision > INT32_MAX) Throw("ValueError", "precision too big");
    const int64_t prec = sp.precision < 0 ? 6 : sp.precision;
    RenderBudget::Charge(static_cast<uint64_t>(prec) + 320);
    const std::string f = absl::StrCat("%.", prec, std::string(1, t));
    const int n = std::snprintf(nullptr, 0, f.c_str(), v.as_float());
    body.assign(static_cast<size_t>(std::max(n, 0)), '\0');
    if (n > 0) std::snprintf(body.data(), body.size() + 1, f.c_str(), v.as_float());
  }
  if (!body.empty() && body[0] == '-') {
    neg = true;
    body.erase(0, 1);
  }
  std::string sign = neg ? "-" : sp.sign == '+' ? "+" : sp.sign == ' ' ? " " : "";
  if (sp.zero && sp.width > static_cast<int64_t>(sign.size() + body.size())) {
    const int64_t zeros = sp.width - static_cast<int64_t>(sign.size() + body.size());
    RenderBudget::Charge(static_cast<uint64_t>(zeros));
    body.insert(0, static_cast<size_t>(zeros), '0');
  }
  return sign + body;
}

std::string Align(const std::string& s, const Spec& sp, char default_align) {
  const int64_t len = static_cast<int64_t>(CodePointCount(s));
  if (sp.width <= len) return s;
  const char a = sp.align ? sp.align : default_align;
  const int64_t pad = sp.width - len;
  RenderBudget::Charge(static_cast<uint64_t>(pad) * sp.fill.size());
  auto rep = [&](int64_t n) {
    std::string f;
    for (int64_t i = 0; i < n; ++i) f += sp.fill;
    return f;
  };
  if (a == '<') return s + rep(pad);
  if (a == '>') return rep(pad) + s;
  return rep(pad / 2) + s + rep(pad - pad / 2);
}

}  // namespace

TString Percent(const TString& fmt, const Value& args) {
  const std::string_view f = fmt.view();
  std::vector<Value> pos;
  const Dict* mapping = nullptr;
  if (args.kind() == Kind::kTuple) {
    pos = args.list();
  } else if (args.kind() == Kind::kDict) {
    mapping = &args.dict();
    pos.push_back(args);
  } else {
    pos.push_back(args);
  }
  size_t next = 0;
  bool taint = fmt.any_taint();
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out.push_back(f[i]);
      continue;
    }
    if (++i >= f.size()) Throw("ValueError", "incomplete format");
    const Value* arg = nullptr;
    if (f[i] == '(') {
      const size_t close = f.find(')', i);
      if (close == std::string_view::npos) Throw("ValueError", "incomplete format key");
      if (!mapping) Throw("TypeError", "format requires a mapping");
      arg = mapping->FindStr(f.substr(i + 1, close - i - 1));
      if (!arg) Throw("KeyError", std::string(f.substr(i + 1, close - i - 1)));
      i = close + 1;
    }
    Spec sp;
    for (; i < f.size() && std::string_view("-+ #0").find(f[i]) != std::string_view::npos; ++i) {
      if (f[i] == '-') sp.align = '<';
      if (f[i] == '+') sp.sign = '+';
      if (f[i] == ' ' && sp.sign != '+') sp.sign = ' ';
      if (f[i] == '#') sp.alt = true;
      if (f[i] == '0') sp.zero = true;
    }
    while (i < f.size() && f[i] >= '0' && f[i] <= '9') sp.width = Digit(sp.width, f[i++]);
    if (i < f.size() && f[i] == '.') {
      sp.precision = 0;
      ++i;
      while (i < f.size() && f[i] >= '0' && f[i] <= '9') sp.precision = Digit(sp.precision, f[i++]);
    }
    if (i >= f.size()) Throw("ValueError", "incomplete format");
    const char t = f[i];
    if (t == '%') {
      out.push_back('%');
      continue;
    }
    if (!arg) {
      if (next >= pos.size()) Throw("TypeError", "not enough arguments for format string");
      arg = &pos[next++];
    }
    if (AnyTaint(*arg)) taint = true;
    std::string piece;
    if (t == 's' || t == 'r' || t == 'a') {
      piece = t == 's' ? ToStr(*arg).str() : Repr(*arg).str();
      if (sp.precision >= 0) {
        const std::vector<uint32_t> off = CodePointOffsets(piece);
        if (static_cast<size_t>(sp.precision) + 1 < off.size()) piece.resize(off[static_cast<size_t>(sp.precision)]);
      }
      sp.zero = false;
    } else if (t == 'c') {
      if (arg->is_string()) {
        piece = arg->str().str();
      } else {
        AppendUtf8(&piece, static_cast<uint32_t>(arg->as_int()));
      }
    } else if (std::string_view("diouxXeEfFgG").find(t) != std::string_view::npos) {
      if (!arg->is_number()) {
        Throw("TypeError", absl::StrCat("%", std::string(1, t), " format: a real number is required, not ", TypeName(*arg)));
      }
      sp.type = t == 'i' || t == 'u' ? 'd' : t;
      piece = FormatNumber(*arg, sp);
    } else {
      Throw("ValueError", absl::StrCat("unsupported format character '", std::string(1, t), "'"));
    }
    out += Align(piece, sp, '>');
  }
  if (!mapping && next < pos.size() && args.kind() == Kind::kTuple) {
    Throw("TypeError", "not all arguments converted during string formatting");
  }
  return TString(std::move(out), taint);
}

TString Format(const TString& fmt, const std::vector<Value>& pos, const std::vector<std::pair<std::string, Value>>& kw) {
  const std::string_view f = fmt.view();
  std::string out;
  bool taint = fmt.any_taint();
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      Throw("ValueError", "Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = f.find('}', i);
    if (close == std::string_view::npos) Throw("ValueError", "Single '{' encountered in format string");
    std::string_view field = f.substr(i + 1, close - i - 1);
    i = close;
    std::string_view spec, conv;
    if (const size_t colon = field.find(':'); colon != std::string_view::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    if (const size_t bang = field.find('!'); bang != std::string_view::npos) {
      conv = field.substr(bang + 1);
      field = field.substr(0, bang);
    }
    const Value* arg = nullptr;
    if (field.empty() || (field[0] >= '0' && field[0] <= '9')) {
      size_t idx = auto_index++;
      if (!field.empty()) idx = static_cast<size_t>(std::stoul(std::string(field)));
      if (idx >= pos.size()) Throw("IndexError", absl::StrCat("Replacement index ", idx, " out of range for positional args tuple"));
      arg = &pos[idx];
    } else {
      if (field.find_first_of(".[") != std::string_view::npos) {
        Throw("ValueError", "format fields with attribute or index lookups are not supported by this engine");
      }
      for (const auto& [k, v] : kw) {
        if (k == field) arg = &v;
      }
      if (!arg) Throw("KeyError", absl::StrCat("'", std::string(field), "'"));
    }
    if (AnyTaint(*arg)) taint = true;
    Spec sp;
    size_t k = 0;
    if (spec.size() >= 2 && std::string_view("<>^=").find(spec[1]) != std::string_view::npos) {
      sp.fill = std::string(1, spec[0]);
      sp.align = spec[1];
      k = 2;
    } else if (!spec.empty() && std::string_view("<>^=").find(spec[0]) != std::string_view::npos) {
      sp.align = spec[0];
      k = 1;
    }
    if (k < spec.size() && (spec[k] == '+' || spec[k] == '-' || spec[k] == ' ')) sp.sign = spec[k++];
    if (k < spec.size() && spec[k] == '#') {
      sp.alt = true;
      ++k;
    }
    if (k < spec.size() && spec[k] == '0') {
      sp.zero = true;
      ++k;
    }
    while (k < spec.size() && spec[k] >= '0' && spec[k] <= '9') sp.width = Digit(sp.width, spec[k++]);
    if (k < spec.size() && spec[k] == '.') {
      sp.precision = 0;
      ++k;
      while (k < spec.size() && spec[k] >= '0' && spec[k] <= '9') sp.precision = Digit(sp.precision, spec[k++]);
    }
    if (k < spec.size()) sp.type = spec[k++];
    if (k != spec.size()) Throw("ValueError", absl::StrCat("Invalid format specifier '", std::string(spec), "'"));
    std::string piece;
    if (conv == "r") {
      piece = Repr(*arg).str();
    } else if (arg->is_number() && arg->kind() != Kind::kBool && sp.type != 's') {
      piece = (sp.type == 0 && sp.width < 0 && sp.precision < 0 && sp.sign == '-') ? ToStr(*arg).str() : FormatNumber(*arg, sp);
    } else {
      piece = ToStr(*arg).str();
      if (sp.precision >= 0) {
        const std::vector<uint32_t> off = CodePointOffsets(piece);
        if (static_cast<size_t>(sp.precision) + 1 < off.size()) piece.resize(off[static_cast<size_t>(sp.precision)]);
      }
    }
    out += Align(piece, sp, arg->is_number() && !arg->is_string() ? '>' : '<');
  }
  return TString(std::move(out), taint);
}

}  // namespace moe::text::jinja::py
