// OpenAI-shaped API errors: {"error": {"message", "type", "param", "code"}}.
//
// Every rejection the gateway makes is one ApiError with its HTTP status:
//   400 invalid_request_error   malformed JSON, wrong type, bad range, unknown model,
//                               prompt longer than the context, oversized body
//   401 authentication_error    missing or wrong API key
//   404 not_found_error         unknown route
//   429 rate_limit_error        one key over its concurrent-request limit
//   503 server_error            bounded queue full (with Retry-After), no live worker
//   500 server_error            worker failure after tokens were already sent
// Thread safety: plain value type.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace moe::gateway {

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty = null
  std::string code;   // empty = null
  int retry_after_s = 0;  // > 0 adds a Retry-After header (503)

  nlohmann::json ToJson() const;
};

ApiError BadRequest(std::string message, std::string param = "", std::string code = "invalid_value");
ApiError TypeError(const std::string& param, const std::string& expected);
// Maps a Status from the worker/placer layer onto an API error.
ApiError FromStatus(const absl::Status& status);

}  // namespace moe::gateway
