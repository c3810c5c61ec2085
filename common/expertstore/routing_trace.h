// RoutingTrace: which experts each token routed to, row by row, as `moe run
// --record-routing` writes it and `moe bench cache` / `moe bench e2e` replay it
// (synthetic traces: cache_sim.h).
//
// Trace file (text, written by SaveTrace, read by LoadTrace):
//   moestream-routing-trace <1|2> <num_layers> <num_experts> <top_k>
//   <token> <layer> <e0> <e1> ... <e_{k-1}>      (one line per token x routed
//       layer, exactly top_k experts; <token> is the position, <num_layers>
//       counts dense layers too)
//   + <token> <layer> <p0> <p1> ...              (version 2: the router
//       look-ahead's prediction for that row, made at the previous layer)
//
// Thread safety: pure functions over their arguments.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace moe::expertstore {

struct RoutingTrace {
  uint32_t num_layers = 0;
  uint32_t num_experts = 0;
  uint32_t top_k = 0;
  uint32_t num_tokens = 0;
  // Flattened accesses in order: key = layer * num_experts + expert.
  std::vector<uint32_t> keys;
  // Optional router look-ahead, per row of top_k accesses (one token x
  // layer): the keys the worker predicts for the next row's layer, sent just
  // before this row's accesses (empty: none, e.g. a token's last layer).
  // Either empty or one entry per row.
  std::vector<std::vector<uint32_t>> ahead;
  // Per row, its token's position as recorded (a run resumed from a saved KV
  // cache starts past 0). Empty: row / num_layers (synthetic traces, where
  // every layer routes).
  std::vector<int64_t> row_positions;
};

// Appends one row - the top_k experts (ids within `layer`) that the token at
// `position` routes to at `layer` - in access order. `predicted`: the router
// look-ahead's prediction for this row (expert ids), made at the previous
// layer of the same token; dropped for a token's first row (no earlier
// layer of that token sent it). The one way traces are built from rows:
// LoadTrace and `moe run --record-routing` both use it.
void AppendRow(RoutingTrace& t, int64_t position, uint32_t layer, std::span<const uint32_t> experts,
               std::span<const uint32_t> predicted = {});

// Routed accesses per token: what the policy's clock counts a token as
// (expertd: MoE layers x top_k). A recorded trace's header counts every layer,
// dense ones included, so this is measured from the rows, not the header.
double AccessesPerToken(const RoutingTrace& t);

absl::Status SaveTrace(const RoutingTrace& t, const std::string& path);
absl::StatusOr<RoutingTrace> LoadTrace(const std::string& path);

}  // namespace moe::expertstore
