// ExpertdService: the gRPC handlers of expertd (proto/expertd.proto). Thin:
// each handler validates the session, calls ExpertStore and maps statuses
// to gRPC codes. Bulk bytes stay in shared memory.
//
// Thread safety: gRPC calls handlers concurrently; ExpertStore and
// SessionChannel are thread-safe.
#pragma once

#include <string>

#include "common/expertstore/store.h"
#include "proto/expertd.grpc.pb.h"
#include "services/expertd/session_channel.h"

namespace moe::expertd {

grpc::Status ToGrpc(const absl::Status& s);

class ExpertdService final : public ExpertD::Service {
 public:
  ExpertdService(expertstore::ExpertStore* store, SessionChannel* channel) : store_(store), channel_(channel) {}

  grpc::Status Attach(grpc::ServerContext*, const AttachRequest*, AttachReply*) override;
  grpc::Status Detach(grpc::ServerContext*, const DetachRequest*, DetachReply*) override;
  grpc::Status FetchExperts(grpc::ServerContext*, const FetchRequest*, grpc::ServerWriter<FetchReply>*) override;
  grpc::Status Hint(grpc::ServerContext*, const HintRequest*, HintReply*) override;
  grpc::Status Stats(grpc::ServerContext*, const StatsRequest*, StatsReply*) override;
  grpc::Status Heat(grpc::ServerContext*, const HeatRequest*, HeatReply*) override;
  grpc::Status Pin(grpc::ServerContext*, const PinRequest*, PinReply*) override;
  grpc::Status SetBudget(grpc::ServerContext*, const SetBudgetRequest*, SetBudgetReply*) override;

 private:
  expertstore::ExpertStore* store_;
  SessionChannel* channel_;
};

// Fills a StatsReply from the store (shared with the metrics exporter).
void FillStats(expertstore::ExpertStore& store, StatsReply* out);

}  // namespace moe::expertd
