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
#include "common/structured/grammar_constraint.h"
#include "proto/inferd.grpc.pb.h"
#include "services/inferd/batcher.h"

namespace moe::inferd {

// Structured outputs need the worker's vocabulary as text: `compiler` null = none (a
// constrained request is then FAILED_PRECONDITION naming `vocab_note`, which says why).
class InferdService final : public ::moe::inferd::InferD::Service {
 public:
  InferdService(Batcher* batcher, SequenceModel* model, structured::ConstraintCompiler* compiler = nullptr,
                std::string vocab_note = "")
      : batcher_(batcher), model_(model), compiler_(compiler), vocab_note_(std::move(vocab_note)) {}

  grpc::Status Generate(grpc::ServerContext* ctx, const GenerateRequest* req,
                        grpc::ServerWriter<GenerateEvent>* writer) override;
  grpc::Status Cancel(grpc::ServerContext* ctx, const CancelRequest* req, CancelReply* reply) override;
  grpc::Status Health(grpc::ServerContext* ctx, const HealthRequest* req, HealthReply* reply) override;
  grpc::Status Stats(grpc::ServerContext* ctx, const StatsRequest* req, StatsReply* reply) override;

 private:
  grpc::Status Refuse(grpc::StatusCode code, const std::string& why);

  Batcher* batcher_;
  SequenceModel* model_;
  structured::ConstraintCompiler* compiler_;
  const std::string vocab_note_;
  std::atomic<uint64_t> next_id_{1};
  std::atomic<int64_t> compile_us_{0};
  std::mutex error_mu_;
  std::string last_refusal_;
};

// The token texts a worker's constraints are compiled against (grammar_constraint.h).
struct ConstraintVocab {
  std::vector<std::string> texts;
  std::vector<int32_t> stop_ids;
  std::string source;  // where it came from (Health)
};

// Supplies the model of an inferd process: adds its flags, then builds it.
class ModelFactory {
 public:
  virtual ~ModelFactory() = default;
  virtual void AddFlags(FlagSet& flags) = 0;
  virtual absl::StatusOr<std::unique_ptr<SequenceModel>> Create() = 0;
  // The vocabulary for structured outputs after Create(): `tokenizer` is --tokenizer ("" =
  // the model's own when it has one). NotFound = structured outputs off on this worker.
  virtual absl::StatusOr<ConstraintVocab> Vocabulary(const std::string& tokenizer) = 0;
};

// main() of an inferd process: `program` names it in messages.
int RunInferd(int argc, char** argv, ModelFactory& factory);

}  // namespace moe::inferd
