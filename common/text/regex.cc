#define PCRE2_CODE_UNIT_WIDTH 8
#include "common/text/regex.h"

#include <pcre2.h>

#include "common/base/status.h"

namespace moe::text {
namespace {

// Per-thread match state: match data for the whole-match pair, and a JIT stack that can
// grow to 8 MiB (the default 32 KiB can run out on long pieces with backtracking patterns).
struct ThreadMatchState {
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_match_context* ctx = pcre2_match_context_create(nullptr);
  ThreadMatchState() {
    if (ctx != nullptr && stack != nullptr) pcre2_jit_stack_assign(ctx, nullptr, stack);
  }
  ~ThreadMatchState() {
    pcre2_match_context_free(ctx);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(md);
  }
};
ThreadMatchState& MatchState() {
  thread_local ThreadMatchState t;
  return t;
}

size_t CharLen(std::string_view s, size_t i) {
  const unsigned b = static_cast<unsigned char>(s[i]);
  size_t n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  return std::min(n, s.size() - i);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern) {
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &off, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return absl::InvalidArgumentError(absl::StrCat("split regex '", AV(pattern), "' does not compile at offset ",
                                                   off, ": ", reinterpret_cast<const char*>(msg)));
  }
  std::unique_ptr<Regex> r(new Regex());
  r->pattern_ = std::string(pattern);
  r->code_ = code;
  r->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return r;
}

absl::StatusOr<std::unique_ptr<Regex>> Regex::Literal(std::string_view literal) {
  std::string p = "\\Q";
  // \Q..\E cannot contain \E; split it out.
  for (size_t i = 0; i < literal.size(); ++i) {
    if (literal[i] == '\\' && i + 1 < literal.size() && literal[i + 1] == 'E') {
      p += "\\E\\\\E\\Q";
      ++i;
    } else {
      p += literal[i];
    }
  }
  p += "\\E";
  return Compile(p);
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  ThreadMatchState& st = MatchState();
  pcre2_match_data* md = st.md;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  size_t last_match_end = static_cast<size_t>(-1);
  while (pos <= text.size()) {
    int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), pos, 0, md, st.ctx)
                  : pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, st.ctx);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && jit_) {
      // JIT resource limit: retry with the interpreter (heap-based backtracking).
      rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, st.ctx);
    }
    // No further match. (A resource limit of the interpreter too leaves the rest of the
    // piece unsplit -- text is never lost; no pattern in the supported files comes close.)
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t s = ov[0], e = ov[1];
    if (s == e && s == last_match_end) {
      if (pos >= text.size()) break;
      pos += CharLen(text, pos);
      continue;
    }
    out->emplace_back(s, e);
    last_match_end = e;
    if (e == s) {
      if (e >= text.size()) break;
      pos = e + CharLen(text, e);
    } else {
      pos = e;
    }
  }
}

}  // namespace moe::text
