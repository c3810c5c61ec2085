#include "common/text/jinja/parser.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/text/jinja/builtins.h"
#include "common/text/utf8.h"

namespace moe::text::jinja {
namespace {

// ---- lexer ------------------------------------------------------------------------------

enum class Tok : uint8_t { kData, kBlockBegin, kBlockEnd, kVarBegin, kVarEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Token {
  Tok type;
  std::string value;  // data text, name, decoded string, operator, number text
  int line;
};

[[noreturn]] void SyntaxError(int line, std::string msg) {
  throw TemplateError{"TemplateSyntaxError", std::move(msg), line};
}

bool IsNameStart(unsigned char c) { return c == '_' || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || c >= 0x80; }
bool IsNameChar(unsigned char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }

std::string NormalizeNewlines(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// Python's str.rstrip() / "\s+" on a UTF-8 tail.
size_t RstripPos(std::string_view s) {
  size_t b = s.size();
  while (b > 0) {
    size_t st = b - 1;
    while (st > 0 && (static_cast<unsigned char>(s[st]) & 0xC0) == 0x80) --st;
    int32_t cp;
    DecodeUtf8(s, st, &cp);
    if (!PyIsSpace(cp)) break;
    b = st;
  }
  return b;
}

size_t SkipSpace(std::string_view s, size_t i) {
  while (i < s.size()) {
    int32_t cp;
    const int n = DecodeUtf8(s, i, &cp);
    if (!PyIsSpace(cp)) break;
    i += static_cast<size_t>(n);
  }
  return i;
}

// Python's unicode-escape decoding of a string literal body (Jinja2 decodes literals so).
std::string DecodeStringLiteral(std::string_view body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out.push_back(c);
      continue;
    }
    const char e = body[++i];
    auto hex = [&](size_t n) -> int32_t {
      int32_t v = 0;
      for (size_t k = 1; k <= n; ++k) {
        if (i + k >= body.size()) SyntaxError(line, "truncated \\x/\\u escape in a string literal");
        const char h = body[i + k];
        const int d = (h >= '0' && h <= '9') ? h - '0' : ((h | 0x20) >= 'a' && (h | 0x20) <= 'f') ? (h | 0x20) - 'a' + 10 : -1;
        if (d < 0) SyntaxError(line, "malformed \\x/\\u escape in a string literal");
        v = v * 16 + d;
      }
      i += n;
      return v;
    };
    switch (e) {
      case '\n': break;  // line continuation
      case '\\': out.push_back('\\'); break;
      case '\'': out.push_back('\''); break;
      case '"': out.push_back('"'); break;
      case 'a': out.push_back('\a'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case 'v': out.push_back('\v'); break;
      case 'x': AppendUtf8(&out, static_cast<uint32_t>(hex(2))); break;
      case 'u': AppendUtf8(&out, static_cast<uint32_t>(hex(4))); break;
      case 'U': {
        const int32_t v = hex(8);
        if (v > 0x10FFFF) SyntaxError(line, "\\U escape out of range in a string literal");
        AppendUtf8(&out, static_cast<uint32_t>(v));
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          int v = e - '0';
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k) {
            v = v * 8 + (body[++i] - '0');
          }
          AppendUtf8(&out, static_cast<uint32_t>(v));
        } else {
          out.push_back('\\');  // unknown escapes stay as written (Python keeps them)
          out.push_back(e);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(NormalizeNewlines(source)) {
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> Run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t start = FindTagStart(pos);
      if (start == std::string::npos) {
        Emit(Tok::kData, src_.substr(pos), pos);
        break;
      }
      const char kind = src_[start + 1];  // '{', '%' or '#'
      const char sign = start + 2 < src_.size() && (src_[start + 2] == '-' || src_[start + 2] == '+') ? src_[start + 2] : 0;
      std::string text = src_.substr(pos, start - pos);
      if (sign == '-') {
        text.resize(RstripPos(text));
      } else if (sign != '+' && kind != '{') {  // lstrip_blocks: blocks and comments only
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() && SkipSpace(text, l_pos) == text.size()) {
          text.resize(l_pos);
        }
      }
      if (!text.empty()) Emit(Tok::kData, text, pos);
      size_t p = start + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        size_t end = src_.find("#}", p);
        if (end == std::string::npos) SyntaxError(LineAt(start), "missing end of comment tag");
        const char esign = end > p && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
        pos = end + 2;
        pos = AfterEnd(pos, esign, /*block=*/true);
        line_starting = pos > 0 && src_[pos - 1] == '\n';
        continue;
      }
      size_t raw_close;
      char raw_sign;
      if (kind == '%' && IsRawBegin(p, &raw_close, &raw_sign)) {
        pos = LexRaw(start, raw_close, raw_sign);
        line_starting = pos > 0 && src_[pos - 1] == '\n';
        continue;
      }
      Emit(kind == '%' ? Tok::kBlockBegin : Tok::kVarBegin, "", start);
      pos = LexExpression(p, kind == '%');
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    tokens_.push_back({Tok::kEof, "", LineAt(src_.size())});
    return std::move(tokens_);
  }

 private:
  int LineAt(size_t pos) {
    while (line_pos_ < pos && line_pos_ < src_.size()) {
      if (src_[line_pos_] == '\n') ++line_;
      ++line_pos_;
    }
    return line_;
  }
  void Emit(Tok t, std::string v, size_t pos) { tokens_.push_back({t, std::move(v), LineAt(pos)}); }

  size_t FindTagStart(size_t pos) const {
    for (size_t i = src_.find('{', pos); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  // Whitespace control after an end delimiter ending at `pos`.
  size_t AfterEnd(size_t pos, char sign, bool block) const {
    if (sign == '-') return SkipSpace(src_, pos);
    if (sign == '+' || !block) return pos;
    if (pos < src_.size() && src_[pos] == '\n') return pos + 1;  // trim_blocks
    return pos;
  }

  // `{% raw %}` (p is just after "{%" and its sign): on success *close is the "%}" position
  // and *sign the whitespace-control sign before it.
  bool IsRawBegin(size_t p, size_t* close, char* sign) const {
    size_t i = SkipSpace(src_, p);
    if (src_.compare(i, 3, "raw") != 0 || (i + 3 < src_.size() && IsNameChar(src_[i + 3]))) return false;
    i = SkipSpace(src_, i + 3);
    *sign = 0;
    if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) *sign = src_[i++];
    if (src_.compare(i, 2, "%}") != 0) return false;
    *close = i;
    return true;
  }

  size_t LexRaw(size_t start, size_t close, char sign) {
    size_t pos = AfterEnd(close + 2, sign, true);
    for (size_t i = src_.find("{%", pos); i != std::string::npos; i = src_.find("{%", i + 2)) {
      size_t j = i + 2;
      const char bsign = j < src_.size() && (src_[j] == '-' || src_[j] == '+') ? src_[j] : 0;
      if (bsign) ++j;
      j = SkipSpace(src_, j);
      if (src_.compare(j, 6, "endraw") != 0) continue;
      j = SkipSpace(src_, j + 6);
      char esign = 0;
      if (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) esign = src_[j++];
      if (src_.compare(j, 2, "%}") != 0) continue;
      std::string text = src_.substr(pos, i - pos);
      if (bsign == '-') text.resize(RstripPos(text));
      if (!text.empty()) Emit(Tok::kData, text, pos);
      return AfterEnd(j + 2, esign, true);
    }
    SyntaxError(LineAt(start), "missing end of raw directive");
  }

  size_t LexExpression(size_t pos, bool block) {
    int balance = 0;
    const int open_line = LineAt(pos);
    while (true) {
      pos = SkipSpace(src_, pos);
      if (pos >= src_.size()) {
        SyntaxError(open_line, block ? "unexpected end of template, expected '%}'" : "unexpected end of template, expected '}}'");
      }
      if (balance == 0) {
        const char* close = block ? "%}" : "}}";
        for (char sign : {'-', '+', '\0'}) {
          if (sign == '+' && !block) continue;
          const size_t at = pos + (sign ? 1 : 0);
          if ((sign == 0 || src_[pos] == sign) && src_.compare(at, 2, close) == 0) {
            Emit(block ? Tok::kBlockEnd : Tok::kVarEnd, "", pos);
            return AfterEnd(at + 2, sign, block);
          }
        }
      }
      const unsigned char c = static_cast<unsigned char>(src_[pos]);
      const size_t tok_start = pos;
      if (c == '\'' || c == '"') {
        size_t i = pos + 1;
        while (i < src_.size() && src_[i] != static_cast<char>(c)) i += src_[i] == '\\' ? 2 : 1;
        if (i >= src_.size()) SyntaxError(LineAt(pos), "unexpected end of string");
        Emit(Tok::kString, DecodeStringLiteral(std::string_view(src_).substr(pos + 1, i - pos - 1), LineAt(pos)), tok_start);
        pos = i + 1;
        continue;
      }
      if (c >= '0' && c <= '9') {
        pos = LexNumber(pos);
        continue;
      }
      if (IsNameStart(c)) {
        size_t i = pos;
        while (i < src_.size() && IsNameChar(static_cast<unsigned char>(src_[i]))) ++i;
        Emit(Tok::kName, src_.substr(pos, i - pos), tok_start);
        pos = i;
        continue;
      }
      static const char* kOps2[] = {"//", "**", "==", "!=", "<=", ">="};
      bool two = false;
      for (const char* op : kOps2) {
        if (src_.compare(pos, 2, op) == 0) {
          Emit(Tok::kOp, op, tok_start);
          pos += 2;
          two = true;
          break;
        }
      }
      if (two) continue;
      static const std::string_view kOps1 = "+-/*%~[](){}<>=.:|,;";
      if (kOps1.find(static_cast<char>(c)) == std::string_view::npos) {
        SyntaxError(LineAt(pos), absl::StrCat("unexpected char '", std::string(1, static_cast<char>(c)), "'"));
      }
      if (c == '(' || c == '[' || c == '{') ++balance;
      if (c == ')' || c == ']' || c == '}') {
        if (balance == 0) SyntaxError(LineAt(pos), absl::StrCat("unexpected '", std::string(1, static_cast<char>(c)), "'"));
        --balance;
      }
      Emit(Tok::kOp, std::string(1, static_cast<char>(c)), tok_start);
      ++pos;
    }
  }

  size_t LexNumber(size_t pos) {
    auto digits = [&](size_t i) {  // (\d+_)*\d+
      const size_t s = i;
      while (i < src_.size() && ((src_[i] >= '0' && src_[i] <= '9') || (src_[i] == '_' && i > s && i + 1 < src_.size() &&
                                                                          src_[i + 1] >= '0' && src_[i + 1] <= '9'))) {
        ++i;
      }
      return i;
    };
    const bool after_dot = pos > 0 && src_[pos - 1] == '.';
    size_t i = digits(pos);
    bool is_float = false;
    if (!after_dot) {
      size_t j = i;
      if (j + 1 < src_.size() && src_[j] == '.' && src_[j + 1] >= '0' && src_[j + 1] <= '9') {
        j = digits(j + 1);
        is_float = true;
      }
      if (j < src_.size() && (src_[j] | 0x20) == 'e') {
        size_t k = j + 1;
        if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
        if (k < src_.size() && src_[k] >= '0' && src_[k] <= '9') {
          j = digits(k);
          is_float = true;
        }
      }
      if (is_float) i = j;
    }
    std::string text = src_.substr(pos, i - pos);
    if (!is_float && src_[pos] == '0' && src_.size() > pos + 1) {
      const char x = static_cast<char>(src_[pos + 1] | 0x20);
      if (x == 'x' || x == 'o' || x == 'b') {
        size_t k = pos + 2;
        while (k < src_.size() && (IsNameChar(static_cast<unsigned char>(src_[k])))) ++k;
        text = src_.substr(pos, k - pos);
        i = k;
      }
    }
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    Emit(is_float ? Tok::kFloat : Tok::kInt, text, pos);
    return i;
  }

  std::string src_;
  std::vector<Token> tokens_;
  size_t line_pos_ = 0;
  int line_ = 1;
};

// ---- parser -----------------------------------------------------------------------------

// Nested blocks, brackets and operator chains (`a + b + c` is as deep as its terms): bounds
// the recursion of the parser and of every walk over the tree (the evaluator, the
// destructors), whatever the template. The corpus nests under 30.
constexpr int kMaxNesting = 200;

class Parser {
 public:
  Parser(std::vector<Token> toks, TemplateAst* ast) : t_(std::move(toks)), ast_(ast) {}

  void Run() {
    ast_->loop_sym = ast_->symbols.Intern("loop");
    ast_->varargs_sym = ast_->symbols.Intern("varargs");
    ast_->kwargs_sym = ast_->symbols.Intern("kwargs");
    std::string end;
    ast_->body = ParseBody({}, &end);
    if (!end.empty()) SyntaxError(Cur().line, absl::StrCat("Encountered unknown tag '", end, "'."));
    ImmortalizeConstants(ast_->body);
  }

 private:
  const Token& Cur() const { return t_[i_]; }
  const Token& Look(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  void Next() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool IsOp(const char* op) const { return Cur().type == Tok::kOp && Cur().value == op; }
  bool IsName(const char* n) const { return Cur().type == Tok::kName && Cur().value == n; }
  bool SkipOp(const char* op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(const char* n) {
    if (!IsName(n)) return false;
    Next();
    return true;
  }
  static std::string Describe(const Token& t) {
    switch (t.type) {
      case Tok::kEof: return "end of template";
      case Tok::kBlockEnd: return "end of statement block";
      case Tok::kVarEnd: return "end of print statement";
      case Tok::kName: return t.value;
      case Tok::kString: return "string";
      case Tok::kInt: return "integer";
      case Tok::kFloat: return "float";
      default: return t.value;
    }
  }
  [[noreturn]] void Unexpected() const { SyntaxError(Cur().line, absl::StrCat("unexpected '", Describe(Cur()), "'")); }
  void ExpectOp(const char* op) {
    if (!SkipOp(op)) {
      SyntaxError(Cur().line, absl::StrCat("expected token '", op, "', got '", Describe(Cur()), "'"));
    }
  }
  std::string ExpectName() {
    if (Cur().type != Tok::kName) SyntaxError(Cur().line, absl::StrCat("expected name, got '", Describe(Cur()), "'"));
    std::string n = Cur().value;
    Next();
    return n;
  }
  void ExpectBlockEnd() {
    if (Cur().type != Tok::kBlockEnd) {
      SyntaxError(Cur().line, absl::StrCat("expected token 'end of statement block', got '", Describe(Cur()), "'"));
    }
    Next();
  }

  void Deeper() {
    if (++depth_ > kMaxNesting) {
      SyntaxError(Cur().line, absl::StrCat("template nests too deeply: more than ", kMaxNesting,
                                           " nested blocks, brackets and operators (limit max_nesting)"));
    }
  }
  struct DepthGuard {
    explicit DepthGuard(Parser* p) : p(p) { p->Deeper(); }
    ~DepthGuard() { --p->depth_; }
    Parser* p;
  };
  // A left-associative chain (a.b.c, a + b + c, a | f | g) builds one level per link.
  struct ChainGuard {
    explicit ChainGuard(Parser* p) : p(p), saved(p->depth_) {}
    ~ChainGuard() { p->depth_ = saved; }
    void Link() { p->Deeper(); }
    Parser* p;
    int saved;
  };

  const std::string* Intern(std::string_view name) { return ast_->symbols.Intern(name); }

  // Constants become immortal, owned by the tree: renders on many threads share them without
  // touching their reference counts.
  void ImmortalizeConstants(const Expr* e) {
    if (!e) return;
    if (e->kind == ExprKind::kConst) {
      if (Object* o = const_cast<Expr*>(e)->value.Immortalize()) ast_->immortals.emplace_back(o);
    }
    for (const Expr* x : {e->a.get(), e->b.get(), e->c.get(), e->dyn_args.get(), e->dyn_kwargs.get()}) {
      ImmortalizeConstants(x);
    }
    for (const auto& x : e->args) ImmortalizeConstants(x.get());
    for (const auto& x : e->keys) ImmortalizeConstants(x.get());
    for (const auto& kv : e->kwargs) ImmortalizeConstants(kv.second.get());
  }
  void ImmortalizeConstants(const Body& body) {
    for (const auto& s : body) {
      ImmortalizeConstants(s->expr.get());
      ImmortalizeConstants(s->filter.get());
      for (const auto& t : s->tests) ImmortalizeConstants(t.get());
      for (const auto& b : s->bodies) ImmortalizeConstants(b);
      ImmortalizeConstants(s->body);
      ImmortalizeConstants(s->else_body);
      for (const auto& d : s->defaults) ImmortalizeConstants(d.get());
      for (const auto& v : s->with_values) ImmortalizeConstants(v.get());
    }
  }

  ExprPtr Node(ExprKind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }

  // ---- statements ----

  // Parses until a block tag whose name is in `ends` (left unconsumed: Cur() is that name,
  // just after the block begin) or the end of the template; *end is the name found ("" at EOF).
  Body ParseBody(std::initializer_list<const char*> ends, std::string* end) {
    DepthGuard g(this);
    Body body;
    while (true) {
      const Token& t = Cur();
      if (t.type == Tok::kEof) {
        end->clear();
        return body;
      }
      if (t.type == Tok::kData) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kData;
        s->line = t.line;
        s->data = t.value;
        body.push_back(std::move(s));
        Next();
        continue;
      }
      if (t.type == Tok::kVarBegin) {
        const int line = t.line;
        Next();
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->line = line;
        s->expr = ParseTuple(true, {}, false);
        if (Cur().type != Tok::kVarEnd) {
          SyntaxError(Cur().line, absl::StrCat("expected token 'end of print statement', got '", Describe(Cur()), "'"));
        }
        Next();
        body.push_back(std::move(s));
        continue;
      }
      if (t.type != Tok::kBlockBegin) Unexpected();
      Next();
      if (Cur().type != Tok::kName) SyntaxError(Cur().line, "tag name expected");
      const std::string name = Cur().value;
      for (const char* e : ends) {
        if (name == e) {
          *end = name;
          return body;
        }
      }
      body.push_back(ParseStatement());
    }
  }

  // Consumes the end tag `name` found by ParseBody and its block end.
  void EndTag() {
    Next();
    ExpectBlockEnd();
  }

  [[noreturn]] void MissingEnd(int line, const char* what, const char* end_tag) {
    SyntaxError(line, absl::StrCat("Unexpected end of template. Jinja was looking for the following tags: '", end_tag,
                                   "'. The innermost block that needs to be closed is '", what, "'."));
  }

  StmtPtr ParseStatement() {
    const Token& t = Cur();
    const int line = t.line;
    const std::string name = t.value;
    auto s = std::make_unique<Stmt>();
    s->line = line;
    Next();
    std::string end;
    if (name == "if") {
      s->kind = StmtKind::kIf;
      s->tests.push_back(ParseTuple(false, {}, false));
      ExpectBlockEnd();
      while (true) {
        s->bodies.push_back(ParseBody({"elif", "else", "endif"}, &end));
        if (end.empty()) MissingEnd(line, "if", "endif");
        if (end == "elif") {
          Next();
          s->tests.push_back(ParseTuple(false, {}, false));
          ExpectBlockEnd();
          continue;
        }
        if (end == "else") {
          EndTag();
          s->else_body = ParseBody({"endif"}, &end);
          if (end.empty()) MissingEnd(line, "if", "endif");
        }
        EndTag();
        return s;
      }
    }
    if (name == "for") {
      s->kind = StmtKind::kFor;
      s->target = ParseTarget(false, "in");
      if (!SkipName("in")) SyntaxError(Cur().line, absl::StrCat("expected 'in', got '", Describe(Cur()), "'"));
      s->expr = ParseTuple(false, {"recursive"}, false);
      if (SkipName("if")) s->filter = ParseExpression(true);
      if (SkipName("recursive")) SyntaxError(line, "recursive for-loops are not supported by this engine");
      ExpectBlockEnd();
      s->body = ParseBody({"endfor", "else"}, &end);
      if (end.empty()) MissingEnd(line, "for", "endfor");
      if (end == "else") {
        EndTag();
        s->else_body = ParseBody({"endfor"}, &end);
        if (end.empty()) MissingEnd(line, "for", "endfor");
      }
      EndTag();
      return s;
    }
    if (name == "set") {
      s->target = ParseTarget(true, "=");
      if (SkipOp("=")) {
        s->kind = StmtKind::kSet;
        s->expr = ParseTuple(true, {}, false);
        ExpectBlockEnd();
        return s;
      }
      s->kind = StmtKind::kSetBlock;
      if (!s->target.attr.empty() || s->target.tuple) SyntaxError(line, "a block set assigns one name");
      if (IsOp("|")) s->expr = ParseFilter(nullptr);
      ExpectBlockEnd();
      s->body = ParseBody({"endset"}, &end);
      if (end.empty()) MissingEnd(line, "set", "endset");
      EndTag();
      return s;
    }
    if (name == "macro") {
      s->kind = StmtKind::kMacro;
      s->name = ExpectName();
      s->name_sym = Intern(s->name);
      ExpectOp("(");
      while (!IsOp(")")) {
        if (!s->params.empty()) ExpectOp(",");
        if (IsOp(")")) break;
        s->params.push_back(ExpectName());
        s->param_syms.push_back(Intern(s->params.back()));
        if (SkipOp("=")) {
          s->defaults.push_back(ParseExpression(true));
        } else if (!s->defaults.empty()) {
          SyntaxError(Cur().line, "non-default argument follows default argument");
        }
      }
      ExpectOp(")");
      ExpectBlockEnd();
      s->body = ParseBody({"endmacro"}, &end);
      if (end.empty()) MissingEnd(line, "macro", "endmacro");
      EndTag();
      std::set<std::string> used;
      CollectNames(s->body, &used);
      s->uses_varargs = used.count("varargs") > 0;
      s->uses_kwargs = used.count("kwargs") > 0;
      return s;
    }
    if (name == "generation") {
      s->kind = StmtKind::kCallBlock;
      ExpectBlockEnd();
      s->body = ParseBody({"endgeneration"}, &end);
      if (end.empty()) MissingEnd(line, "generation", "endgeneration");
      EndTag();
      return s;
    }
    if (name == "filter") {
      s->kind = StmtKind::kFilterBlock;
      s->expr = ParseFilter(nullptr, /*start_inline=*/true);
      ExpectBlockEnd();
      s->body = ParseBody({"endfilter"}, &end);
      if (end.empty()) MissingEnd(line, "filter", "endfilter");
      EndTag();
      return s;
    }
    if (name == "with") {
      s->kind = StmtKind::kWith;
      while (Cur().type != Tok::kBlockEnd) {
        if (!s->with_targets.empty()) ExpectOp(",");
        s->with_targets.push_back(ParseTarget(false, "="));
        ExpectOp("=");
        s->with_values.push_back(ParseExpression(true));
      }
      ExpectBlockEnd();
      s->body = ParseBody({"endwith"}, &end);
      if (end.empty()) MissingEnd(line, "with", "endwith");
      EndTag();
      return s;
    }
    if (name == "break" || name == "continue") {
      s->kind = name == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      ExpectBlockEnd();
      return s;
    }
    SyntaxError(line, absl::StrCat("Encountered unknown tag '", name, "'."));
  }

  // name | name, name, ... | (name, name) | ns.attr (with_namespace)
  Target ParseTarget(bool with_namespace, const char* stop) {
    Target t;
    if (with_namespace && Cur().type == Tok::kName && Look().type == Tok::kOp && Look().value == ".") {
      t.names.push_back(ExpectName());
      t.syms.push_back(Intern(t.names.back()));
      Next();
      t.attr = ExpectName();
      return t;
    }
    const bool paren = SkipOp("(");
    while (true) {
      if (Cur().type != Tok::kName) SyntaxError(Cur().line, absl::StrCat("can't assign to '", Describe(Cur()), "'"));
      t.names.push_back(ExpectName());
      t.syms.push_back(Intern(t.names.back()));
      if (!SkipOp(",")) break;
      t.tuple = true;
      if (paren ? IsOp(")") : (IsName(stop) || IsOp(stop))) break;
    }
    if (paren) {
      ExpectOp(")");
      t.tuple = true;
    }
    return t;
  }

  // ---- expressions ----

  bool IsTupleEnd(std::initializer_list<const char*> extra) const {
    const Token& t = Cur();
    if (t.type == Tok::kVarEnd || t.type == Tok::kBlockEnd || (t.type == Tok::kOp && t.value == ")")) return true;
    for (const char* e : extra) {
      if (t.type == Tok::kName && t.value == e) return true;
    }
    return false;
  }

  ExprPtr ParseTuple(bool with_condexpr, std::initializer_list<const char*> extra, bool explicit_parens) {
    const int line = Cur().line;
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) ExpectOp(",");
      if (IsTupleEnd(extra)) break;
      args.push_back(ParseExpression(with_condexpr));
      if (IsOp(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) SyntaxError(line, absl::StrCat("Expected an expression, got '", Describe(Cur()), "'"));
    }
    auto e = Node(ExprKind::kTuple, line);
    e->args = std::move(args);
    return e;
  }

  ExprPtr ParseExpression(bool with_condexpr) {
    DepthGuard g(this);
    return with_condexpr ? ParseCondExpr() : ParseOr();
  }

  ExprPtr ParseCondExpr() {
    ChainGuard chain(this);
    ExprPtr e = ParseOr();
    while (IsName("if")) {
      chain.Link();
      const int line = Cur().line;
      Next();
      auto c = Node(ExprKind::kCond, line);
      c->a = ParseOr();
      c->b = std::move(e);
      if (SkipName("else")) c->c = ParseCondExpr();
      e = std::move(c);
    }
    return e;
  }

  ExprPtr ParseOr() {
    ChainGuard chain(this);
    ExprPtr l = ParseAnd();
    while (IsName("or")) {
      chain.Link();
      auto e = Node(ExprKind::kOr, Cur().line);
      Next();
      e->a = std::move(l);
      e->b = ParseAnd();
      l = std::move(e);
    }
    return l;
  }

  ExprPtr ParseAnd() {
    ChainGuard chain(this);
    ExprPtr l = ParseNot();
    while (IsName("and")) {
      chain.Link();
      auto e = Node(ExprKind::kAnd, Cur().line);
      Next();
      e->a = std::move(l);
      e->b = ParseNot();
      l = std::move(e);
    }
    return l;
  }

  ExprPtr ParseNot() {
    if (IsName("not")) {
      DepthGuard g(this);
      auto e = Node(ExprKind::kNot, Cur().line);
      Next();
      e->a = ParseNot();
      return e;
    }
    return ParseCompare();
  }

  ExprPtr ParseCompare() {
    const int line = Cur().line;
    ExprPtr first = ParseMath1();
    std::vector<std::string> ops;
    std::vector<ExprPtr> rhs;
    while (true) {
      static const std::pair<const char*, const char*> kCmp[] = {
          {"==", "eq"}, {"!=", "ne"}, {"<", "lt"}, {"<=", "lteq"}, {">", "gt"}, {">=", "gteq"}};
      bool matched = false;
      for (const auto& [tok, op] : kCmp) {
        if (IsOp(tok)) {
          Next();
          ops.push_back(op);
          rhs.push_back(ParseMath1());
          matched = true;
          break;
        }
      }
      if (matched) continue;
      if (SkipName("in")) {
        ops.push_back("in");
        rhs.push_back(ParseMath1());
      } else if (IsName("not") && Look().type == Tok::kName && Look().value == "in") {
        Next();
        Next();
        ops.push_back("notin");
        rhs.push_back(ParseMath1());
      } else {
        break;
      }
    }
    if (ops.empty()) return first;
    auto e = Node(ExprKind::kCompare, line);
    e->a = std::move(first);
    e->ops = std::move(ops);
    e->args = std::move(rhs);
    return e;
  }

  ExprPtr Binary(const char* op, int line, ExprPtr l, ExprPtr r) {
    auto e = Node(ExprKind::kBinary, line);
    e->name = std::string(op);  // (not operator=(const char*): GCC bug 105329 warns)
    e->a = std::move(l);
    e->b = std::move(r);
    return e;
  }

  ExprPtr ParseMath1() {
    ChainGuard chain(this);
    ExprPtr l = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      chain.Link();
      const std::string op = Cur().value;
      const int line = Cur().line;
      Next();
      l = Binary(op == "+" ? "+" : "-", line, std::move(l), ParseConcat());
    }
    return l;
  }

  ExprPtr ParseConcat() {
    const int line = Cur().line;
    ExprPtr first = ParseMath2();
    if (!IsOp("~")) return first;
    auto e = Node(ExprKind::kConcat, line);
    e->args.push_back(std::move(first));
    while (SkipOp("~")) e->args.push_back(ParseMath2());
    return e;
  }

  ExprPtr ParseMath2() {
    ChainGuard chain(this);
    ExprPtr l = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      chain.Link();
      static const char* kOps[] = {"*", "/", "//", "%"};
      const char* op = nullptr;
      for (const char* o : kOps) {
        if (Cur().value == o) op = o;
      }
      const int line = Cur().line;
      Next();
      l = Binary(op, line, std::move(l), ParsePow());
    }
    return l;
  }

  ExprPtr ParsePow() {
    ChainGuard chain(this);
    ExprPtr l = ParseUnary(true);
    while (IsOp("**")) {
      chain.Link();
      const int line = Cur().line;
      Next();
      l = Binary("**", line, std::move(l), ParseUnary(true));
    }
    return l;
  }

  ExprPtr ParseUnary(bool with_filter) {
    DepthGuard g(this);
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      auto e = Node(IsOp("-") ? ExprKind::kNeg : ExprKind::kPos, Cur().line);
      Next();
      e->a = ParseUnary(false);
      node = std::move(e);
    } else {
      node = ParsePrimary();
    }
    node = ParsePostfix(std::move(node));
    if (with_filter) node = ParseFilterExpr(std::move(node));
    return node;
  }

  ExprPtr ParsePrimary() {
    const Token& t = Cur();
    const int line = t.line;
    if (t.type == Tok::kName) {
      auto e = Node(ExprKind::kConst, line);
      if (t.value == "true" || t.value == "True") {
        e->value = Value::Bool(true);
      } else if (t.value == "false" || t.value == "False") {
        e->value = Value::Bool(false);
      } else if (t.value == "none" || t.value == "None") {
        e->value = Value::None();
      } else {
        e->kind = ExprKind::kName;
        e->name = t.value;
        e->sym = Intern(e->name);
      }
      Next();
      return e;
    }
    if (t.type == Tok::kString) {
      std::string s = t.value;
      Next();
      while (Cur().type == Tok::kString) {
        s += Cur().value;
        Next();
      }
      auto e = Node(ExprKind::kConst, line);
      e->value = Value::Str(std::move(s));
      return e;
    }
    if (t.type == Tok::kInt || t.type == Tok::kFloat) {
      auto e = Node(ExprKind::kConst, line);
      e->value = t.type == Tok::kInt ? Value::FromInt(ParseInt(t.value, line)) : Value::Float(std::strtod(t.value.c_str(), nullptr));
      Next();
      return e;
    }
    if (IsOp("(")) {
      Next();
      ExprPtr e = ParseTuple(true, {}, true);
      ExpectOp(")");
      return e;
    }
    if (IsOp("[")) {
      Next();
      auto e = Node(ExprKind::kList, line);
      while (!IsOp("]")) {
        if (!e->args.empty()) ExpectOp(",");
        if (IsOp("]")) break;
        e->args.push_back(ParseExpression(true));
      }
      ExpectOp("]");
      return e;
    }
    if (IsOp("{")) {
      Next();
      auto e = Node(ExprKind::kDict, line);
      while (!IsOp("}")) {
        if (!e->keys.empty()) ExpectOp(",");
        if (IsOp("}")) break;
        e->keys.push_back(ParseExpression(true));
        ExpectOp(":");
        e->args.push_back(ParseExpression(true));
      }
      ExpectOp("}");
      return e;
    }
    Unexpected();
  }

  static Int ParseInt(const std::string& s, int line) {
    int base = 10;
    size_t i = 0;
    if (s.size() > 2 && s[0] == '0') {
      const char x = static_cast<char>(s[1] | 0x20);
      if (x == 'x') base = 16;
      if (x == 'o') base = 8;
      if (x == 'b') base = 2;
      if (base != 10) i = 2;
    }
    Int v = 0;
    for (; i < s.size(); ++i) {
      const char c = static_cast<char>(s[i] | 0x20);
      const int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : 99;
      if (d >= base) SyntaxError(line, absl::StrCat("invalid integer literal '", s, "'"));
      v = v * base + d;
      if (v > (Int(1) << 120)) SyntaxError(line, "integer literal too large");
    }
    return v;
  }

  ExprPtr ParsePostfix(ExprPtr node) {
    ChainGuard chain(this);
    while (true) {
      if (IsOp(".") || IsOp("[")) {
        chain.Link();
        node = ParseSubscript(std::move(node));
      } else if (IsOp("(")) {
        chain.Link();
        node = ParseCall(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr ParseFilterExpr(ExprPtr node) {
    ChainGuard chain(this);
    while (true) {
      if (IsOp("|")) {
        chain.Link();
        node = ParseFilter(std::move(node));
      } else if (IsName("is")) {
        chain.Link();
        node = ParseTest(std::move(node));
      } else if (IsOp("(")) {
        chain.Link();
        node = ParseCall(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr ParseSubscript(ExprPtr node) {
    const int line = Cur().line;
    if (SkipOp(".")) {
      if (Cur().type == Tok::kName) {
        auto e = Node(ExprKind::kGetattr, line);
        e->a = std::move(node);
        e->name = ExpectName();
        return e;
      }
      if (Cur().type != Tok::kInt) SyntaxError(Cur().line, "expected name or number");
      auto e = Node(ExprKind::kGetitem, line);
      e->a = std::move(node);
      e->b = Node(ExprKind::kConst, line);
      e->b->value = Value::FromInt(ParseInt(Cur().value, line));
      Next();
      return e;
    }
    ExpectOp("[");
    std::vector<ExprPtr> args;
    while (!IsOp("]")) {
      if (!args.empty()) ExpectOp(",");
      args.push_back(ParseSubscribed());
    }
    ExpectOp("]");
    auto e = Node(ExprKind::kGetitem, line);
    e->a = std::move(node);
    if (args.size() == 1) {
      e->b = std::move(args[0]);
    } else {
      e->b = Node(ExprKind::kTuple, line);
      e->b->args = std::move(args);
    }
    return e;
  }

  ExprPtr ParseSubscribed() {
    const int line = Cur().line;
    ExprPtr start;
    if (!IsOp(":")) {
      ExprPtr e = ParseExpression(true);
      if (!IsOp(":")) return e;
      start = std::move(e);
    }
    Next();  // ':'
    auto s = Node(ExprKind::kSlice, line);
    s->a = std::move(start);
    if (!IsOp(":") && !IsOp("]") && !IsOp(",")) s->b = ParseExpression(true);
    if (SkipOp(":")) {
      if (!IsOp("]") && !IsOp(",")) s->c = ParseExpression(true);
    }
    return s;
  }

  void ParseCallArgs(Expr* e) {
    const int line = Cur().line;
    ExpectOp("(");
    bool require_comma = false;
    while (!IsOp(")")) {
      if (require_comma) {
        ExpectOp(",");
        if (IsOp(")")) break;
      }
      if (IsOp("*")) {
        if (e->dyn_args || e->dyn_kwargs) SyntaxError(line, "invalid syntax for function call expression");
        Next();
        e->dyn_args = ParseExpression(true);
      } else if (IsOp("**")) {
        if (e->dyn_kwargs) SyntaxError(line, "invalid syntax for function call expression");
        Next();
        e->dyn_kwargs = ParseExpression(true);
      } else if (Cur().type == Tok::kName && Look().type == Tok::kOp && Look().value == "=") {
        if (e->dyn_kwargs) SyntaxError(line, "invalid syntax for function call expression");
        std::string key = Cur().value;
        Next();
        Next();
        e->kwargs.emplace_back(std::move(key), ParseExpression(true));
      } else {
        if (e->dyn_args || e->dyn_kwargs || !e->kwargs.empty()) {
          SyntaxError(line, "invalid syntax for function call expression");
        }
        e->args.push_back(ParseExpression(true));
      }
      require_comma = true;
    }
    ExpectOp(")");
  }

  ExprPtr ParseCall(ExprPtr node) {
    auto e = Node(ExprKind::kCall, Cur().line);
    e->a = std::move(node);
    ParseCallArgs(e.get());
    return e;
  }

  ExprPtr ParseFilter(ExprPtr node, bool start_inline = false) {
    ChainGuard chain(this);
    while (IsOp("|") || start_inline) {
      chain.Link();
      if (!start_inline) Next();
      start_inline = false;
      const int line = Cur().line;
      std::string name = ExpectName();
      while (SkipOp(".")) {
        name.push_back('.');
        name.append(ExpectName());
      }
      auto e = Node(ExprKind::kFilter, line);
      e->a = std::move(node);
      e->name = name;
      e->builtin = FindFilter(name);
      if (!e->builtin) throw TemplateError{"TemplateAssertionError", absl::StrCat("No filter named '", name, "'."), line};
      if (IsOp("(")) ParseCallArgs(e.get());
      node = std::move(e);
    }
    return node;
  }

  ExprPtr ParseTest(ExprPtr node) {
    const int line = Cur().line;
    Next();  // 'is'
    const bool negated = SkipName("not");
    std::string name = ExpectName();
    while (SkipOp(".")) {
      name.push_back('.');
      name.append(ExpectName());
    }
    auto e = Node(ExprKind::kTest, line);
    e->a = std::move(node);
    e->name = name;
    e->builtin = FindTest(name);
    if (!e->builtin) throw TemplateError{"TemplateAssertionError", absl::StrCat("No test named '", name, "'."), line};
    if (IsOp("(")) {
      ParseCallArgs(e.get());
    } else if ((Cur().type == Tok::kName || Cur().type == Tok::kString || Cur().type == Tok::kInt ||
                Cur().type == Tok::kFloat || IsOp("(") || IsOp("[") || IsOp("{")) &&
               !IsName("else") && !IsName("or") && !IsName("and")) {
      if (IsName("is")) SyntaxError(line, "You cannot chain multiple tests with is");
      e->args.push_back(ParsePostfix(ParsePrimary()));
    }
    if (!negated) return e;
    auto n = Node(ExprKind::kNot, line);
    n->a = std::move(e);
    return n;
  }

 public:
  static void CollectNames(const Expr* e, std::set<std::string>* out) {
    if (!e) return;
    if (e->kind == ExprKind::kName) out->insert(e->name);
    CollectNames(e->a.get(), out);
    CollectNames(e->b.get(), out);
    CollectNames(e->c.get(), out);
    CollectNames(e->dyn_args.get(), out);
    CollectNames(e->dyn_kwargs.get(), out);
    for (const auto& x : e->args) CollectNames(x.get(), out);
    for (const auto& x : e->keys) CollectNames(x.get(), out);
    for (const auto& kv : e->kwargs) CollectNames(kv.second.get(), out);
  }
  static void CollectNames(const Body& body, std::set<std::string>* out) {
    for (const auto& s : body) {
      CollectNames(s->expr.get(), out);
      CollectNames(s->filter.get(), out);
      for (const auto& t : s->tests) CollectNames(t.get(), out);
      for (const auto& b : s->bodies) CollectNames(b, out);
      CollectNames(s->body, out);
      CollectNames(s->else_body, out);
      for (const auto& d : s->defaults) CollectNames(d.get(), out);
      for (const auto& v : s->with_values) CollectNames(v.get(), out);
      if (s->kind == StmtKind::kSet && !s->target.attr.empty()) out->insert(s->target.names[0]);
    }
  }

 private:
  std::vector<Token> t_;
  TemplateAst* ast_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

std::unique_ptr<TemplateAst> Parse(std::string_view source) {
  Lexer lexer(source);
  auto ast = std::make_unique<TemplateAst>();
  Parser parser(lexer.Run(), ast.get());
  parser.Run();
  return ast;
}

namespace {
void ExprLiterals(const Expr* e, std::vector<std::string>* out) {
  if (!e) return;
  if (e->kind == ExprKind::kConst && e->value.is_string()) out->push_back(e->value.str().str());
  for (const Expr* x : {e->a.get(), e->b.get(), e->c.get(), e->dyn_args.get(), e->dyn_kwargs.get()}) ExprLiterals(x, out);
  for (const auto& x : e->args) ExprLiterals(x.get(), out);
  for (const auto& x : e->keys) ExprLiterals(x.get(), out);
  for (const auto& kv : e->kwargs) ExprLiterals(kv.second.get(), out);
}
void BodyLiterals(const Body& body, std::vector<std::string>* out) {
  for (const auto& s : body) {
    if (s->kind == StmtKind::kData) out->push_back(s->data);
    ExprLiterals(s->expr.get(), out);
    ExprLiterals(s->filter.get(), out);
    for (const auto& t : s->tests) ExprLiterals(t.get(), out);
    for (const auto& b : s->bodies) BodyLiterals(b, out);
    BodyLiterals(s->body, out);
    BodyLiterals(s->else_body, out);
    for (const auto& d : s->defaults) ExprLiterals(d.get(), out);
    for (const auto& v : s->with_values) ExprLiterals(v.get(), out);
  }
}
}  // namespace

std::vector<std::string> Literals(const TemplateAst& ast) {
  std::vector<std::string> out;
  BodyLiterals(ast.body, &out);
  return out;
}

std::set<std::string> ReferencedNames(const TemplateAst& ast) {
  std::set<std::string> out;
  Parser::CollectNames(ast.body, &out);
  return out;
}

}  // namespace moe::text::jinja
