// OwnershipMap: which host of an expert-parallel group computes each routed
// expert (docs/MULTIHOST.md, "Processes and ownership").
//
// One JSON file, the same on every host of the group:
//   {"format": "moestream-ownership/1", "epoch": 3,
//    "weights": "container:1a2b3c4d/1234t/19456r",   // the model's weights identity
//    "hosts": ["10.0.0.1:7100", "10.0.0.2:7100"],    // peer addresses (inferd --peer-listen)
//    "owner": [[0, 1, 0, ...], ...],                 // [layer][expert] -> host index; one row per
//                                                    // layer of routed experts (0 .. num_hidden_layers,
//                                                    // the MTP layer last), dense layers' rows empty
//    "replicated": [[layer, expert], ...]}           // hot experts every host computes itself
// A host computes what it owns or replicates; everything else goes to the
// owner. `moe ownership` writes it (balanced by heat when given one). A map of
// another model (weights identity) or with a shape that does not match the
// model is refused naming the field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace moe::peer {

inline constexpr const char* kOwnershipFormat = "moestream-ownership/1";

struct OwnershipMap {
  uint64_t epoch = 0;
  std::string weights;             // the model's weights identity (WeightsIdentity)
  std::vector<std::string> hosts;  // host index -> peer address
  std::vector<std::vector<int>> owner;            // [layer][expert] -> host index (empty row: no routed experts)
  std::vector<std::vector<uint8_t>> replicated;   // [layer][expert] -> every host computes it

  // The host that computes (layer, expert) for `self`: self when it owns or
  // replicates it (or the layer has no row), else the owner.
  int HostFor(int self, int layer, int expert) const;
  // Owned (not replicated) experts per host, over all layers.
  std::vector<int64_t> OwnedCounts() const;

  // Refuses what is malformed: format, epoch >= 1, hosts non-empty and
  // distinct, owner entries in range, replicated pairs inside owner's shape.
  static absl::StatusOr<OwnershipMap> FromJson(const nlohmann::json& j);
  static absl::StatusOr<OwnershipMap> Load(const std::string& path);
  nlohmann::json ToJson() const;
  // The map's shape against a model: num_layers + 1 rows (the MTP layer's
  // last), `moe_layers[l]` rows of n_experts, others empty; the weights identity.
  absl::Status CheckModel(const std::string& weights_identity, const std::vector<bool>& moe_layers,
                          int n_experts) const;
};

// Spreads every (layer, expert) over hosts: per layer, experts by heat
// descending (heat[layer][expert], may be empty: uniform), the hottest
// `replicate_share` of all experts replicated, each other one given to the
// host whose owned heat in that layer is least (ties: lowest index), so the
// hosts' per-layer load is balanced.
OwnershipMap BalancedOwnership(const std::vector<std::string>& hosts, const std::vector<bool>& moe_layers,
                               int n_experts, const std::vector<std::vector<double>>& heat,
                               double replicate_share, uint64_t epoch, std::string weights);

}  // namespace moe::peer
