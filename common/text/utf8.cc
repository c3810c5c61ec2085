#include "common/text/utf8.h"

namespace moe::text {

int DecodeUtf8(std::string_view s, size_t i, int32_t* cp) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  const size_t avail = s.size() - i;
  const unsigned b0 = p[0];
  if (b0 < 0x80) {
    *cp = static_cast<int32_t>(b0);
    return 1;
  }
  int need;
  unsigned lo = 0x80, hi = 0xBF;
  uint32_t v;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
    v = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    v = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    v = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *cp = -1;
    return 1;
  }
  for (int k = 1; k <= need; ++k) {
    if (static_cast<size_t>(k) >= avail) {
      *cp = -1;
      return k;
    }
    const unsigned b = p[k];
    const unsigned l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      *cp = -1;
      return k;
    }
    v = (v << 6) | (b & 0x3F);
  }
  *cp = static_cast<int32_t>(v);
  return need + 1;
}

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    int32_t cp;
    const int n = DecodeUtf8(s, i, &cp);
    if (cp < 0) return false;
    i += n;
  }
  return true;
}

std::string SanitizeUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (size_t i = 0; i < s.size();) {
    int32_t cp;
    const int n = DecodeUtf8(s, i, &cp);
    if (cp < 0) {
      out += "\xEF\xBF\xBD";
    } else {
      out.append(s.data() + i, n);
    }
    i += n;
  }
  return out;
}

void AppendUtf8(std::string* out, uint32_t cp) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t IncompleteUtf8Tail(std::string_view s) {
  // Look back at most 3 bytes for a lead byte whose sequence runs past the end while every
  // byte present is well-formed.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t start = n - back;
    const unsigned b = static_cast<unsigned char>(s[start]);
    if (b >= 0x80 && b < 0xC0) continue;  // continuation byte: keep looking for the lead
    if (b < 0x80) return 0;
    int32_t cp;
    const int used = DecodeUtf8(s, start, &cp);
    // Ill-formed because it ran out of input (consumed everything available) -> incomplete.
    if (cp < 0 && static_cast<size_t>(used) == back) return back;
    return 0;
  }
  return 0;
}

namespace {
struct ByteTables {
  std::array<std::string, 256> to_unicode;
  std::array<int32_t, 324> from_unicode;  // code points used are < 324
  ByteTables() {
    from_unicode.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const uint32_t cp = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
      AppendUtf8(&to_unicode[b], cp);
      from_unicode[cp] = b;
    }
  }
};
const ByteTables& Tables() {
  static const ByteTables t;
  return t;
}
}  // namespace

const std::array<std::string, 256>& ByteToUnicode() { return Tables().to_unicode; }

int UnicodeToByte(int32_t cp) {
  if (cp < 0 || cp >= 324) return -1;
  return Tables().from_unicode[cp];
}

bool PyIsSpace(int32_t c) {
  return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string PyStrip(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b) {
    int32_t cp;
    const int n = DecodeUtf8(s, a, &cp);
    if (!PyIsSpace(cp)) break;
    a += n;
  }
  while (b > a) {
    size_t st = b - 1;
    while (st > a && (static_cast<unsigned char>(s[st]) & 0xC0) == 0x80) --st;
    int32_t cp;
    DecodeUtf8(s, st, &cp);
    if (!PyIsSpace(cp)) break;
    b = st;
  }
  return std::string(s.substr(a, b - a));
}

}  // namespace moe::text
