#define PCRE2_CODE_UNIT_WIDTH 8
#include "common/text/regex.h"

#include <pcre2.h>

#include "common/base/status.h"

namespace moe::text {
namespace {

// One match-data block per thread, big enough for the whole-match pair.
struct ThreadMatchData {
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  ~ThreadMatchData() { pcre2_match_data_free(md); }
};
pcre2_match_data* MatchData() {
  thread_local ThreadMatchData t;
  return t.md;
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
  pcre2_match_data* md = MatchData();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  size_t last_match_end = static_cast<size_t>(-1);
  while (pos <= text.size()) {
    const int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), pos, 0, md, nullptr)
                        : pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc < 0) break;  // PCRE2_ERROR_NOMATCH (or a resource limit: treat as no further match)
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
