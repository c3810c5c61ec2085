#include "services/peer/peer_flags.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"
#include "common/base/log.h"
#include "common/base/status.h"
#include "common/base/text_file.h"
#include "services/peer/peer_tls.h"

namespace moe::peer {

void PeerFlags::Register(FlagSet& f) {
  f.AddString("peer-listen", &listen,
              "expert parallelism: serve RunExperts to the group's other hosts on HOST:PORT (TCP; off by default)");
  f.AddString("peer-token-file", &token_file,
              "expert parallelism: the group's bearer token (a file readable by its owner only; required with "
              "--peer-listen or --ownership-map)");
  f.AddString("ownership-map", &map_file,
              "expert parallelism: the group's (layer, expert) -> host map (moe ownership); experts other hosts own "
              "are computed there");
  f.AddInt("host-index", &host_index, "expert parallelism: this host's index in the ownership map's hosts");
  f.AddInt("peer-deadline-ms", &deadline_ms,
           "expert parallelism: deadline of one RunExperts; past it the experts are computed here");
  f.AddInt("peer-deadline-per-expert-ms", &deadline_per_expert_ms,
           "expert parallelism: added to --peer-deadline-ms per expert of the call (the owner may read each cold)");
  f.AddInt("peer-suspect-ms", &suspect_ms,
           "expert parallelism: after a failed call, how long a host's experts are computed here before it is "
           "tried again");
  f.AddBool("peer-fetch-weights", &fetch_weights,
            "expert parallelism: an expert another host owns whose rows outweigh its record (long prefill chunks) "
            "is fetched from that host's memory (FetchExpert) instead of read from this host's disk; for networks "
            "faster than the local disk");
  f.AddString("peer-tls-cert", &tls_cert,
              "expert parallelism: this host's certificate (PEM), signed by --peer-tls-ca: the peer port and calls "
              "to peers use mTLS (with --peer-tls-key, --peer-tls-ca; the token is still checked)");
  f.AddString("peer-tls-key", &tls_key, "expert parallelism: the private key of --peer-tls-cert (PEM, mode 0600)");
  f.AddString("peer-tls-ca", &tls_ca, "expert parallelism: the group's CA certificate (PEM): peers must present one it signed");
  f.AddInt("peer-max-rows", &max_rows, "expert parallelism: (row, expert) pairs this host computes for peers at once");
}

absl::Status PeerFlags::CheckUnused() const {
  if (enabled()) return absl::OkStatus();
  const PeerFlags d;
  const char* given = !token_file.empty()                                 ? "--peer-token-file"
                      : host_index != d.host_index                       ? "--host-index"
                      : deadline_ms != d.deadline_ms                     ? "--peer-deadline-ms"
                      : deadline_per_expert_ms != d.deadline_per_expert_ms ? "--peer-deadline-per-expert-ms"
                      : suspect_ms != d.suspect_ms                       ? "--peer-suspect-ms"
                      : max_rows != d.max_rows                           ? "--peer-max-rows"
                      : fetch_weights                                    ? "--peer-fetch-weights"
                      : !tls_cert.empty()                                ? "--peer-tls-cert"
                      : !tls_key.empty()                                 ? "--peer-tls-key"
                      : !tls_ca.empty()                                  ? "--peer-tls-ca"
                                                                         : nullptr;
  if (given == nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(given, " acts only with --ownership-map or --peer-listen (expert parallelism is off)"));
}

std::vector<bool> MoeLayers(const ModelConfig& c) {
  std::vector<bool> v(c.num_hidden_layers + 1, false);
  for (int l = c.first_k_dense_replace; l < c.num_hidden_layers; ++l) v[l] = true;
  v[c.num_hidden_layers] = c.num_nextn_predict_layers > 0;
  return v;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  MOE_RETURN_IF_ERROR(CheckPrivateFile(path, "--peer-token-file"));
  absl::StatusOr<std::string> text = ReadTextFile(path);
  if (!text.ok()) return absl::NotFoundError(absl::StrCat("--peer-token-file ", text.status().message()));
  std::string t(absl::StripAsciiWhitespace(*text));
  if (t.size() < 16) {
    return absl::InvalidArgumentError(absl::StrCat("--peer-token-file ", path, ": token shorter than 16 characters"));
  }
  return t;
}

absl::StatusOr<std::unique_ptr<PeerNode>> StartPeerNode(const PeerFlags& f, Model& model, const Container* container,
                                                        const std::string& state_identity,
                                                        const std::string& weights_identity) {
  if (f.token_file.empty()) {
    return absl::InvalidArgumentError("--peer-listen / --ownership-map need --peer-token-file (never an open port)");
  }
  if (f.map_file.empty()) return absl::InvalidArgumentError("--peer-listen needs --ownership-map (its epoch)");
  if (f.deadline_ms < 1 || f.deadline_per_expert_ms < 0 || f.suspect_ms < 0 || f.max_rows < 1) {
    return absl::InvalidArgumentError(
        "--peer-deadline-ms >= 1, --peer-deadline-per-expert-ms >= 0, --peer-suspect-ms >= 0, --peer-max-rows >= 1");
  }
  MOE_ASSIGN_OR_RETURN(std::string token, ReadTokenFile(f.token_file));
  MOE_ASSIGN_OR_RETURN(PeerTls tls, LoadPeerTls(f.tls_cert, f.tls_key, f.tls_ca));
  MOE_ASSIGN_OR_RETURN(OwnershipMap map, OwnershipMap::Load(f.map_file));
  const ModelConfig& c = model.config();
  if (absl::Status st = map.CheckModel(weights_identity, MoeLayers(c), c.n_routed_experts); !st.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("--ownership-map ", f.map_file, ": ", st.message()));
  }
  if (f.host_index < 0 || f.host_index >= static_cast<int64_t>(map.hosts.size())) {
    return absl::InvalidArgumentError(absl::StrCat("--host-index ", f.host_index, ": the map has ", map.hosts.size(),
                                                   " hosts (0..", map.hosts.size() - 1, ")"));
  }
  auto crc = [container](int layer, int expert) -> uint32_t {
    if (container == nullptr) return 0;
    const ExpertRecordInfo* r = container->FindExpert(layer, expert);
    return r == nullptr ? 0 : r->crc;
  };
  PeerClientOptions co;
  co.self = static_cast<int>(f.host_index);
  co.token = token;
  co.model_identity = state_identity;
  co.tls = tls;
  co.deadline = std::chrono::milliseconds(f.deadline_ms);
  co.per_expert = std::chrono::milliseconds(f.deadline_per_expert_ms);
  co.suspect_for = std::chrono::milliseconds(f.suspect_ms);
  co.record_crc = crc;
  co.record_bytes = [container](int layer, int expert) -> int64_t {
    const ExpertRecordInfo* r = container == nullptr ? nullptr : container->FindExpert(layer, expert);
    return r == nullptr ? 0 : static_cast<int64_t>(r->length);
  };
  co.row_wire_bytes = 4 * c.hidden_size;  // bf16 in + bf16 out
  co.fetch_weights = f.fetch_weights;
  const uint64_t epoch = map.epoch;
  const std::vector<int64_t> owned = map.OwnedCounts();
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<PeerClient> client, PeerClient::Create(std::move(map), std::move(co)));
  PeerServerOptions so;
  so.token = token;
  so.model_identity = state_identity;
  so.epoch = epoch;
  so.max_rows_in_flight = f.max_rows;
  so.record_crc = crc;
  so.tls = std::move(tls);
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<PeerNode> node, PeerNode::Start(&model, std::move(client), f.listen, so));
  model.set_remote_experts(node->client());
  MOE_LOG(INFO) << "peer: host " << f.host_index << " of " << owned.size() << " (epoch " << epoch << "), owns "
                << owned[f.host_index] << " experts; the others' go to their owners";
  return node;
}

}  // namespace moe::peer
