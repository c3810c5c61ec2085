#include "services/gateway/api_error.h"

#include "common/base/status.h"

namespace moe::gateway {

nlohmann::json ApiError::ToJson() const {
  nlohmann::json e;
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  e["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
  return nlohmann::json{{"error", e}};
}

ApiError BadRequest(std::string message, std::string param, std::string code) {
  ApiError e;
  e.http_status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

ApiError TypeError(const std::string& param, const std::string& expected) {
  return BadRequest("'" + param + "' must be " + expected, param, "invalid_type");
}

ApiError FromStatus(const absl::Status& status) {
  ApiError e;
  e.message = std::string(SV(status.message()));
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      e.http_status = 400;
      e.type = "invalid_request_error";
      e.code = "invalid_value";
      break;
    case absl::StatusCode::kUnauthenticated:
      e.http_status = 401;
      e.type = "authentication_error";
      e.code = "invalid_api_key";
      break;
    case absl::StatusCode::kResourceExhausted:
      e.http_status = 503;
      e.type = "server_error";
      e.code = "server_overloaded";
      e.retry_after_s = 1;
      break;
    case absl::StatusCode::kUnavailable:
      e.http_status = 503;
      e.type = "server_error";
      e.code = "worker_unavailable";
      e.retry_after_s = 1;
      break;
    case absl::StatusCode::kCancelled:
      e.http_status = 499;
      e.type = "server_error";
      e.code = "cancelled";
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
      e.code = "internal_error";
      break;
  }
  return e;
}

}  // namespace moe::gateway
