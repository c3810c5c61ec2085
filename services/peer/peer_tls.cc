#include "services/peer/peer_tls.h"

#include <sys/stat.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/text_file.h"

namespace moe::peer {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag, bool secret) {
  if (secret) {
    if (absl::Status st = CheckPrivateFile(path, flag); !st.ok()) return st;
  }
  absl::StatusOr<std::string> text = ReadTextFile(path);
  if (!text.ok()) return absl::NotFoundError(absl::StrCat(flag, " ", text.status().message()));
  if (!absl::StrContains(*text, "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": not a PEM file"));
  }
  return text;
}

}  // namespace

absl::Status CheckPrivateFile(const std::string& path, const char* flag) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return absl::NotFoundError(absl::StrCat(flag, " ", path, ": cannot stat"));
  if ((st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(flag, " ", path, ": readable by group or others (chmod 600 it)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<PeerTls> LoadPeerTls(const std::string& cert, const std::string& key, const std::string& ca) {
  const int given = !cert.empty() + !key.empty() + !ca.empty();
  if (given == 0) return PeerTls{};
  if (given != 3) {
    return absl::InvalidArgumentError("--peer-tls-cert, --peer-tls-key and --peer-tls-ca go together (all or none)");
  }
  PeerTls t;
  absl::StatusOr<std::string> c = ReadPem(cert, "--peer-tls-cert", false);
  if (!c.ok()) return c.status();
  absl::StatusOr<std::string> k = ReadPem(key, "--peer-tls-key", true);
  if (!k.ok()) return k.status();
  absl::StatusOr<std::string> a = ReadPem(ca, "--peer-tls-ca", false);
  if (!a.ok()) return a.status();
  t.cert_pem = std::move(*c);
  t.key_pem = std::move(*k);
  t.ca_pem = std::move(*a);
  return t;
}

std::shared_ptr<grpc::ChannelCredentials> PeerChannelCredentials(const PeerTls& tls) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = tls.ca_pem;
  o.pem_private_key = tls.key_pem;
  o.pem_cert_chain = tls.cert_pem;
  return grpc::SslCredentials(o);
}

std::shared_ptr<grpc::ServerCredentials> PeerServerCredentials(const PeerTls& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions o(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = tls.ca_pem;
  o.pem_key_cert_pairs.push_back({tls.key_pem, tls.cert_pem});
  return grpc::SslServerCredentials(o);
}

}  // namespace moe::peer
