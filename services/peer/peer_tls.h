// mTLS for the peer port (inferd --peer-tls-cert/--peer-tls-key/--peer-tls-ca):
// every host of a group presents a certificate signed by the group's CA and
// accepts only peers that do, both ways; the bearer token is still checked
// inside. Without them the port is plaintext TCP plus the token (a private
// network only: docs/MULTIHOST.md).
#pragma once

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"

namespace moe::peer {

struct PeerTls {
  std::string cert_pem, key_pem, ca_pem;
  bool enabled() const { return !cert_pem.empty(); }
};

// OK when `path` exists and neither group nor others may read it (a key, a
// token); else NotFound / PermissionDenied naming `flag` and the path.
absl::Status CheckPrivateFile(const std::string& path, const char* flag);

// Reads the three PEM files (all or none: empty paths give a disabled PeerTls).
// Refuses a key file that group or others may read, and files that are not PEM.
absl::StatusOr<PeerTls> LoadPeerTls(const std::string& cert, const std::string& key, const std::string& ca);

// Insecure credentials when !tls.enabled().
std::shared_ptr<grpc::ChannelCredentials> PeerChannelCredentials(const PeerTls& tls);
std::shared_ptr<grpc::ServerCredentials> PeerServerCredentials(const PeerTls& tls);

}  // namespace moe::peer
