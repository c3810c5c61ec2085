// inferd's expert-parallel flags and the start of a host's PeerNode from
// them (docs/MULTIHOST.md). Off unless --ownership-map or --peer-listen is
// given; then the group's bearer token (--peer-token-file, a file only its
// owner may read) and this host's index in the map are required: a peer port
// is never open without authentication.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/flags.h"
#include "common/format/container.h"
#include "common/format/model_config.h"
#include "common/model/model.h"
#include "services/peer/peer_server.h"

namespace moe::peer {

struct PeerFlags {
  std::string listen;      // HOST:PORT to serve RunExperts on
  std::string token_file;  // the group's bearer token
  std::string map_file;    // the ownership map (moe ownership)
  int64_t host_index = -1;
  int64_t deadline_ms = 250;
  int64_t deadline_per_expert_ms = 50;
  int64_t suspect_ms = 10000;
  int64_t max_rows = 8192;
  bool fetch_weights = false;
  std::string tls_cert, tls_key, tls_ca;

  void Register(FlagSet& f);
  bool enabled() const { return !listen.empty() || !map_file.empty(); }
  // When !enabled(): InvalidArgument naming a peer flag that was given anyway
  // (it would be ignored); OK otherwise.
  absl::Status CheckUnused() const;
};

// Which layers have routed experts, per the map's rows: 0 .. num_hidden_layers
// (the MTP layer last, when the model has one).
std::vector<bool> MoeLayers(const ModelConfig& c);

// Reads the token file: refuses a missing file, one that group or others may
// read, and a token shorter than 16 characters (whitespace trimmed).
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// Loads and checks the map against the model, reads the token, and starts
// this host's node: the client (set on `model` as its RemoteExperts) and,
// with --peer-listen, the server. `container` gives the record CRCs (may be
// null for a checkpoint). Errors name the flag.
absl::StatusOr<std::unique_ptr<PeerNode>> StartPeerNode(const PeerFlags& f, Model& model, const Container* container,
                                                        const std::string& state_identity,
                                                        const std::string& weights_identity);

}  // namespace moe::peer
