// Internal to the io engines: splitting one ReadOp into chunks and joining
// their results (first error wins, reported once when the last chunk ends).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <iterator>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "common/expertstore/io_engine.h"

namespace moe::expertstore::internal {

struct OpState {
  ReadOp op;
  ReadDone done;
  std::atomic<int> remaining{0};
  std::mutex mu;
  absl::Status status;
  void Fail(absl::Status s) {
    std::lock_guard<std::mutex> l(mu);
    if (status.ok()) status = std::move(s);
  }
  // Returns true when this was the last chunk (caller then calls Finish).
  bool ChunkDone() { return remaining.fetch_sub(1) == 1; }
  void Finish() {
    absl::Status s;
    {
      std::lock_guard<std::mutex> l(mu);
      s = status;
    }
    done(std::move(s));
  }
};

struct Chunk {
  std::shared_ptr<OpState> op;
  uint64_t offset;  // file offset
  uint64_t len;     // bytes requested
  uint8_t* dest;
};

// Queues an op's chunks: a speculative op at the back, any other ahead of the
// first queued speculative chunk (one priority rule for every engine).
inline void EnqueueChunks(std::deque<Chunk>& q, std::vector<Chunk> chunks) {
  if (chunks.empty()) return;
  auto pos = q.end();
  if (!chunks.front().op->op.speculative) {
    pos = std::find_if(q.begin(), q.end(), [](const Chunk& c) { return c.op->op.speculative; });
  }
  q.insert(pos, std::make_move_iterator(chunks.begin()), std::make_move_iterator(chunks.end()));
}

// Splits op into chunks of at most chunk_bytes (multiples of 4 KiB).
inline std::vector<Chunk> SplitOp(const std::shared_ptr<OpState>& st, uint64_t chunk_bytes) {
  const ReadOp& op = st->op;
  uint64_t total = op.io_length ? op.io_length : op.length;
  if (chunk_bytes < 4096) chunk_bytes = 4096;
  chunk_bytes = chunk_bytes / 4096 * 4096;
  std::vector<Chunk> out;
  for (uint64_t o = 0; o < total; o += chunk_bytes) {
    out.push_back(Chunk{st, op.offset + o, std::min(chunk_bytes, total - o), op.dest + o});
  }
  if (out.empty()) out.push_back(Chunk{st, op.offset, 0, op.dest});
  st->remaining.store(static_cast<int>(out.size()));
  return out;
}

// Classifies the result of one read of a chunk: returns the number of bytes
// still to read at (offset + got), 0 when the chunk is complete, or an error.
// `got` < len is fine only past the op's required length (EOF in padding).
inline absl::StatusOr<uint64_t> ChunkResult(const Chunk& c, int64_t res) {
  const ReadOp& op = c.op->op;
  if (res < 0)
    return absl::DataLossError(absl::StrCat("read of ", op.label, " at offset ", c.offset, " (", c.len,
                                            " bytes): ", strerror(static_cast<int>(-res))));
  uint64_t got = static_cast<uint64_t>(res);
  if (got >= c.len) return uint64_t{0};
  uint64_t required_end = op.offset + op.length;
  if (c.offset + got >= required_end) return uint64_t{0};  // EOF inside alignment padding
  if (got > 0 && got % 4096 == 0) return c.len - got;      // partial read: continue
  return absl::DataLossError(absl::StrCat("short read of ", op.label, ": file ends at offset ", c.offset + got,
                                          ", record needs ", op.offset, "..", required_end,
                                          " (truncated shard?)"));
}

}  // namespace moe::expertstore::internal
