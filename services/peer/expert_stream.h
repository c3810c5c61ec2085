// An expert's stored weights as a FetchExpert stream (proto/peer.proto):
// the owner cuts its three matrices into ExpertChunks; the fetcher checks
// and reassembles them into an ExpertLease that owns its bytes (each array
// 64-byte aligned for the kernels). Transport-free: both sides are tested
// without gRPC (tests/peer/expert_stream_test.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/expert_source/expert_source.h"
#include "proto/peer.pb.h"

namespace moe::peer {

inline constexpr size_t kExpertChunkBytes = 1 << 20;

// Calls `emit` with the header chunk (shapes, record_crc, bytes_crc, no data)
// and then the bytes in chunks of at most kExpertChunkBytes; stops at the
// first false `emit` returns (the reader went away). Returns whether all went.
bool StreamExpert(const ExpertWeights& w, uint32_t record_crc, const std::function<bool(const ExpertChunk&)>& emit);

// Reassembles one stream: Add each chunk in order, then Finish. Errors
// (DataLoss) name what is wrong: no or a malformed header, a matrix header
// that does not match its format, more bytes than announced, fewer, or a CRC
// that differs.
class ExpertAssembler {
 public:
  absl::Status Add(const ExpertChunk& chunk);
  absl::StatusOr<ExpertLease> Finish();
  uint32_t record_crc() const { return header_.record_crc(); }
  int64_t total_bytes() const { return total_; }

 private:
  struct Owned {
    ExpertWeights w;
    std::vector<uint8_t> bytes;
  };
  int64_t PartBytes(int p) const;
  bool have_header_ = false;
  ExpertChunk header_;
  std::unique_ptr<Owned> owned_;
  uint8_t* base_ = nullptr;
  std::vector<int64_t> offsets_;  // of the six arrays in owned_->bytes
  int part_ = 0;
  int64_t in_part_ = 0, total_ = 0, got_ = 0;
  uint32_t crc_ = 0;
};

}  // namespace moe::peer
