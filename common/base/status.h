// Status helpers. Debian's absl 20220623 has no status_macros.h, so we keep
// our own. Library code returns absl::Status / absl::StatusOr and never aborts.
#pragma once

#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#define MOE_STATUS_CONCAT_INNER_(a, b) a##b
#define MOE_STATUS_CONCAT_(a, b) MOE_STATUS_CONCAT_INNER_(a, b)

// Returns from the current function if `expr` (an absl::Status) is not OK.
#define MOE_RETURN_IF_ERROR(expr)                        \
  do {                                                   \
    ::absl::Status moe_status_ = (expr);                 \
    if (!moe_status_.ok()) return moe_status_;           \
  } while (0)

// MOE_ASSIGN_OR_RETURN(auto x, MakeX()); declares/assigns `lhs` from a
// StatusOr, or returns its error.
#define MOE_ASSIGN_OR_RETURN(lhs, expr) \
  MOE_ASSIGN_OR_RETURN_IMPL_(MOE_STATUS_CONCAT_(moe_statusor_, __LINE__), lhs, expr)
#define MOE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return std::move(tmp).status();   \
  lhs = std::move(tmp).value()

namespace moe {

// Debian's absl 20220623 is built with ABSL_OPTION_USE_STD_STRING_VIEW=0:
// absl::string_view is NOT std::string_view. Convert explicitly at calls into
// absl (StrCat, SimpleAtoi, ...); absl::Status::message() returns absl's type.
inline absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }
inline std::string_view SV(absl::string_view s) { return std::string_view(s.data(), s.size()); }

// Prefixes a non-OK status message with context, keeping its code.
inline absl::Status Annotate(const absl::Status& s, std::string_view context) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(AV(context), ": ", s.message()));
}

}  // namespace moe
