// Worker over gRPC: one inferd process at "unix:/path" or "host:port".
//
// Each sequence is one server-streaming Generate call read on its own
// thread (a worker streams a few dozen tokens/s per sequence; a thread per
// stream is cheap at the gateway's scale of hundreds of sequences).
// Cancel() sends the Cancel RPC (asynchronously) and cancels the call's
// context, so the worker drops the sequence before its next step either way.
// Transport failures (worker gone, socket refused) become Unavailable
// (the placer takes the worker out of rotation).
// Thread safety: all methods are thread-safe.
#pragma once

#include <memory>
#include <string>

#include "services/gateway/worker.h"

namespace moe::gateway {

class GrpcWorker final : public Worker {
 public:
  // `target` in gRPC syntax: "unix:/run/moestream/inferd0.sock", "127.0.0.1:50051".
  GrpcWorker(std::string name, std::string target);
  ~GrpcWorker() override;

  const std::string& name() const override { return name_; }
  std::unique_ptr<SeqHandle> Generate(GenerateParams params, SeqSink sink) override;
  absl::StatusOr<WorkerInfo> Health() override;

  struct Impl;

 private:
  std::string name_;
  std::shared_ptr<Impl> impl_;
};

}  // namespace moe::gateway
