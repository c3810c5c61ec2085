// One HTTP/1.x request as the gateway's routes see it, after framing (http_request_reader.h)
// and Content-Encoding decoding: nothing here is raw wire state.
// Thread safety: plain value type.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moe::gateway {

struct HttpRequest {
  std::string method;  // as sent (an HTTP token)
  std::string target;  // request-target as sent
  std::string path;    // target before '?', not percent-decoded (routes match it exactly)
  std::string query;   // after '?'
  int version = 11;    // 10 or 11
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, in order
  std::string body;    // decoded
  bool keep_alive = true;
  std::string peer;    // client address: "127.0.0.1", "::1", or "unix"

  // Value of the first header named `lower_name`, or nullptr.
  const std::string* Header(std::string_view lower_name) const {
    for (const auto& [k, v] : headers) {
      if (k == lower_name) return &v;
    }
    return nullptr;
  }
  std::string HeaderOr(std::string_view lower_name, std::string fallback = "") const {
    const std::string* v = Header(lower_name);
    return v ? *v : std::move(fallback);
  }
};

}  // namespace moe::gateway
