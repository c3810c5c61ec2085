// The InferD gRPC service (proto/inferd.proto) over a Batcher, and the
// reusable main of an inferd process (flags, config file, signals), so the
// production binary (engine model) and test binaries (test models) share
// every line but the model.
//
// Generate: submits the sequence, then forwards the batcher's outputs to
// the stream from the call's own thread (the batcher never blocks on a slow
// client). A client that closes the stream (ServerContext::IsCancelled,
// checked every 2 ms while waiting) or a failed write cancels the sequence;
// so does the Cancel RPC.
// Thread safety: gRPC calls run concurrently; the Batcher is thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/base/flags.h"
#include "proto/inferd.grpc.pb.h"
#include "services/inferd/batcher.h"

namespace moe::inferd {

class InferdService final : public ::moe::inferd::InferD::Service {
 public:
  InferdService(Batcher* batcher, SequenceModel* model) : batcher_(batcher), model_(model) {}

  grpc::Status Generate(grpc::ServerContext* ctx, const GenerateRequest* req,
                        grpc::ServerWriter<GenerateEvent>* writer) override;
  grpc::Status Cancel(grpc::ServerContext* ctx, const CancelRequest* req, CancelReply* reply) override;
  grpc::Status Health(grpc::ServerContext* ctx, const HealthRequest* req, HealthReply* reply) override;
  grpc::Status Stats(grpc::ServerContext* ctx, const StatsRequest* req, StatsReply* reply) override;

 private:
  Batcher* batcher_;
  SequenceModel* model_;
  std::atomic<uint64_t> next_id_{1};
};

// Supplies the model of an inferd process: adds its flags, then builds it.
class ModelFactory {
 public:
  virtual ~ModelFactory() = default;
  virtual void AddFlags(FlagSet& flags) = 0;
  virtual absl::StatusOr<std::unique_ptr<SequenceModel>> Create() = 0;
};

// main() of an inferd process: `program` names it in messages.
int RunInferd(int argc, char** argv, ModelFactory& factory);

}  // namespace moe::inferd
