#include "common/text/py_json.h"

#include <cstdio>
#include <vector>

#include "common/text/utf8.h"

namespace moe::text {
namespace {

void DumpString(const std::string& raw, bool ensure_ascii, std::string* out) {
  const std::string s = IsValidUtf8(raw) ? raw : SanitizeUtf8(raw);
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
    if (!ensure_ascii) {
      out->append(s, i, n);
    } else if (cp >= 0x10000) {
      const uint32_t v = static_cast<uint32_t>(cp) - 0x10000;
      std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      *out += buf;
    } else {
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      *out += buf;
    }
    i += n;
  }
  out->push_back('"');
}

void DumpScalar(const nlohmann::ordered_json& j, bool ensure_ascii, std::string* out) {
  switch (j.type()) {
    case nlohmann::json::value_t::string:
      DumpString(j.get_ref<const std::string&>(), ensure_ascii, out);
      break;
    case nlohmann::json::value_t::boolean:
      *out += j.get<bool>() ? "true" : "false";
      break;
    case nlohmann::json::value_t::null:
    case nlohmann::json::value_t::discarded:
      *out += "null";
      break;
    default:  // numbers: nlohmann writes integers as is and floats shortest round-trip
      *out += j.dump();
      break;
  }
}

// Iterative (an explicit stack, no recursion): the value may come from a client and nest
// arbitrarily deep; the thread's stack must not be what bounds it.
void Dump(const nlohmann::ordered_json& root, bool ensure_ascii, std::string* out) {
  struct Frame {
    const nlohmann::ordered_json* node;
    nlohmann::ordered_json::const_iterator it;
  };
  std::vector<Frame> stack;
  auto open = [&](const nlohmann::ordered_json& j) {
    if (!j.is_object() && !j.is_array()) {
      DumpScalar(j, ensure_ascii, out);
      return;
    }
    out->push_back(j.is_object() ? '{' : '[');
    stack.push_back({&j, j.cbegin()});
  };
  open(root);
  while (!stack.empty()) {
    Frame& f = stack.back();
    if (f.it == f.node->cend()) {
      out->push_back(f.node->is_object() ? '}' : ']');
      stack.pop_back();
      continue;
    }
    if (f.it != f.node->cbegin()) *out += ", ";
    if (f.node->is_object()) {
      DumpString(f.it.key(), ensure_ascii, out);
      *out += ": ";
    }
    const nlohmann::ordered_json& child = *f.it;
    ++f.it;  // before open(): it may grow the stack and move `f`
    open(child);
  }
}

}  // namespace

std::string PyJsonDumps(const nlohmann::ordered_json& j, bool ensure_ascii) {
  std::string out;
  Dump(j, ensure_ascii, &out);
  return out;
}

}  // namespace moe::text
