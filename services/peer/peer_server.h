// PeerService: the owner's side of expert parallelism (proto/peer.proto).
// RunExperts computes the asked experts' outputs on this host's model
// (Model::RunExperts: this host's expert source, numerics and kernels) and
// returns them uncombined. It refuses, by name: a caller without the group's
// bearer token (UNAUTHENTICATED), another model identity or map epoch
// (FAILED_PRECONDITION), malformed rows (INVALID_ARGUMENT), more rows in
// flight than its bound (RESOURCE_EXHAUSTED: the caller computes them itself),
// and a caller that has gone (CANCELLED).
// PeerNode bundles a host's client and server with the right teardown order.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "common/model/model.h"
#include "proto/peer.grpc.pb.h"
#include "services/peer/peer_client.h"
#include "services/peer/peer_tls.h"

namespace moe::peer {

struct PeerServerOptions {
  std::string token;
  std::string model_identity;
  uint64_t epoch = 0;
  int64_t max_rows_in_flight = 8192;  // (row, expert) pairs computing at once, all callers
  std::function<uint32_t(int layer, int expert)> record_crc;  // 0: unknown
  PeerTls tls;  // mTLS: only peers with a certificate of the group's CA connect (disabled: plaintext + token)
};

struct PeerServerStats {
  int64_t calls = 0, refused = 0, jobs = 0, rows = 0;
  int64_t fetches = 0;  // experts streamed (FetchExpert)
};

class PeerService final : public ExpertPeer::Service {
 public:
  PeerService(const Model* model, PeerServerOptions opt) : model_(model), opt_(std::move(opt)) {}
  grpc::Status RunExperts(grpc::ServerContext* ctx, const RunExpertsRequest* req, RunExpertsReply* reply) override;
  grpc::Status FetchExpert(grpc::ServerContext* ctx, const FetchExpertRequest* req,
                           grpc::ServerWriter<ExpertChunk>* writer) override;
  PeerServerStats stats() const;

 private:
  grpc::Status Refuse(grpc::StatusCode code, const std::string& why);
  // The token, model identity and epoch checks every call passes first.
  grpc::Status Admit(grpc::ServerContext* ctx, const std::string& identity, uint64_t epoch);
  const Model* model_;
  PeerServerOptions opt_;
  std::atomic<int64_t> in_flight_{0};
  std::atomic<int64_t> calls_{0}, refused_{0}, jobs_{0}, rows_{0}, fetches_{0};
};

// A host's part of the group: the client the engine uses (if the host sends
// experts elsewhere) and the server (if it listens). The server stops first.
class PeerNode {
 public:
  // listen: HOST:PORT (empty: no server). Unavailable when it cannot bind.
  static absl::StatusOr<std::unique_ptr<PeerNode>> Start(const Model* model, std::unique_ptr<PeerClient> client,
                                                         const std::string& listen, PeerServerOptions server_opt);
  ~PeerNode();
  PeerClient* client() { return client_.get(); }
  PeerService* service() { return service_.get(); }
  // The bound port (an address ending in :0 picks one).
  int port() const { return port_; }

 private:
  std::unique_ptr<PeerClient> client_;
  std::unique_ptr<PeerService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace moe::peer
