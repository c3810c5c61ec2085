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
#include <utility>
#include <vector>

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
  bool speculative = false;  // queued at prefetch priority (cleared by a promotion)
};

// Queues an op's chunks: a speculative op at the back, any other ahead of the
// first queued speculative chunk (one priority rule for every engine). The
// queue is always [demand chunks..., speculative chunks...].
inline void EnqueueChunks(std::deque<Chunk>& q, std::vector<Chunk> chunks) {
  if (chunks.empty()) return;
  auto pos = q.end();
  if (!chunks.front().speculative) {
    pos = std::find_if(q.begin(), q.end(), [](const Chunk& c) { return c.speculative; });
  }
  q.insert(pos, std::make_move_iterator(chunks.begin()), std::make_move_iterator(chunks.end()));
}

// The queue and dispatch rule of every engine (the engine guards it with its
// own lock):
//  * order: demand chunks first (FIFO), then speculative ones (FIFO);
//  * a speculative chunk is dispatched only when no demand chunk is queued
//    (it is at the front) and fewer than `max_speculative_inflight` are in
//    flight (0 = no cap), so a demand read arriving finds all but that many
//    of the queue depth free;
//  * Promote(tag): the queued chunks of ops with that tag become demand,
//    moved (in order) ahead of the first speculative chunk — a demand fetch
//    joined a prefetch. Chunks already in flight are not touched.
class ChunkQueue {
 public:
  explicit ChunkQueue(int max_speculative_inflight = 0) : max_spec_(max_speculative_inflight) {}

  void Enqueue(std::vector<Chunk> chunks) { EnqueueChunks(q_, std::move(chunks)); }

  // Returns how many queued chunks became demand.
  size_t Promote(uint64_t tag) {
    if (tag == 0) return 0;
    auto first_spec = std::find_if(q_.begin(), q_.end(), [](const Chunk& c) { return c.speculative; });
    if (std::none_of(first_spec, q_.end(), [tag](const Chunk& c) { return c.op->op.tag == tag; })) return 0;
    std::vector<Chunk> moved;
    std::deque<Chunk> rest;
    for (auto it = first_spec; it != q_.end(); ++it) {
      if (it->op->op.tag == tag) {
        it->speculative = false;
        moved.push_back(std::move(*it));
      } else {
        rest.push_back(std::move(*it));
      }
    }
    q_.erase(first_spec, q_.end());
    q_.insert(q_.end(), std::make_move_iterator(moved.begin()), std::make_move_iterator(moved.end()));
    q_.insert(q_.end(), std::make_move_iterator(rest.begin()), std::make_move_iterator(rest.end()));
    return moved.size();
  }

  // True when the front chunk may go to the device now.
  bool CanDispatch() const {
    if (q_.empty()) return false;
    if (!q_.front().speculative) return true;
    return max_spec_ <= 0 || spec_inflight_ < uint64_t(max_spec_);
  }
  // Precondition: CanDispatch(). The caller reports the chunk's end with Finished.
  Chunk Pop() {
    Chunk c = std::move(q_.front());
    q_.pop_front();
    if (c.speculative && ++spec_inflight_ > spec_high_water_) spec_high_water_ = spec_inflight_;
    return c;
  }
  void Finished(const Chunk& c) {
    if (c.speculative) --spec_inflight_;
  }
  // Every queued chunk (shutdown).
  std::deque<Chunk> TakeAll() { return std::exchange(q_, {}); }

  bool empty() const { return q_.empty(); }
  const std::deque<Chunk>& queued() const { return q_; }
  uint64_t speculative_inflight() const { return spec_inflight_; }
  uint64_t speculative_high_water() const { return spec_high_water_; }

 private:
  std::deque<Chunk> q_;
  int max_spec_;
  uint64_t spec_inflight_ = 0;
  uint64_t spec_high_water_ = 0;
};

// Splits op into chunks of at most chunk_bytes (multiples of 4 KiB).
inline std::vector<Chunk> SplitOp(const std::shared_ptr<OpState>& st, uint64_t chunk_bytes) {
  const ReadOp& op = st->op;
  uint64_t total = op.io_length ? op.io_length : op.length;
  if (chunk_bytes < 4096) chunk_bytes = 4096;
  chunk_bytes = chunk_bytes / 4096 * 4096;
  std::vector<Chunk> out;
  for (uint64_t o = 0; o < total; o += chunk_bytes) {
    out.push_back(Chunk{st, op.offset + o, std::min(chunk_bytes, total - o), op.dest + o, op.speculative});
  }
  if (out.empty()) out.push_back(Chunk{st, op.offset, 0, op.dest, op.speculative});
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
