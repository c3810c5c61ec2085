// The xgrammar Grammar of a ConstraintSpec (constraint_spec.h), shared by the gateway's
// validation and the worker's compiler so that both read a request the same way. Every
// xgrammar exception becomes InvalidArgument with xgrammar's message.
// Thread safety: pure function.
#pragma once

#include "absl/status/statusor.h"
#include "common/structured/constraint_spec.h"
#include "xgrammar/xgrammar.h"

namespace moe::structured {

absl::StatusOr<xgrammar::Grammar> BuildGrammar(const ConstraintSpec& spec);

}  // namespace moe::structured
