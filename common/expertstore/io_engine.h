// IoEngine: asynchronous reads of expert records into slabs.
//
// Problem in numbers: a cold GLM-5 token reads ~600 records of ~19 MB; the
// disk here gives 2.0 GB/s at queue depth 1 and 2.4 GB/s at 8-16. A record
// is split into chunks (default 2 MiB) so one record alone keeps the queue
// full. Two implementations, chosen at run time:
//   - io_uring (liburing): one ring thread, O_DIRECT reads, registered
//     buffers (one per slab) when the kernel and RLIMIT_MEMLOCK allow,
//     falling back to plain reads when registration fails;
//   - a pread thread pool of queue_depth threads (io_uring unavailable,
//     or forced for comparison).
// Priorities (internal::ChunkQueue, one rule for both): demand chunks are
// dispatched first; a speculative (prefetch) chunk only while no demand
// chunk is queued and fewer than max_speculative_inflight are in flight;
// Promote(tag) turns a prefetch that a demand read now waits for into demand.
// Errors: a short read (EOF before `length` bytes) or an I/O error fails
// that op only, with a message naming the op's label, offset and counts.
//
// Thread safety: Submit may be called from any thread; `done` runs on an
// engine thread (keep it short or hand off). The destructor waits for
// in-flight reads and fails queued ones with Cancelled.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace moe::expertstore {

struct ReadOp {
  int fd = -1;
  uint64_t offset = 0;     // 4 KiB aligned for O_DIRECT fds
  uint64_t length = 0;     // bytes that must be read (the record)
  uint64_t io_length = 0;  // bytes to request (>= length; aligned); 0 = length
  uint8_t* dest = nullptr;
  int buf_index = -1;      // registered buffer holding [dest, dest+io_length), or -1
  std::string label;       // for errors: e.g. "shard-00003.bin record (3, 17)"
  // A prefetch nobody waits for yet: its queued chunks yield to every
  // non-speculative op submitted later (demand reads are not stuck behind
  // a prediction's reads; chunks already in flight are not preempted).
  bool speculative = false;
  // Names the op for Promote (e.g. the fill it serves); 0 = none.
  uint64_t tag = 0;
};

using ReadDone = std::function<void(absl::Status)>;

struct IoConfig {
  enum class Kind { kAuto, kUring, kPread };
  Kind kind = Kind::kAuto;
  int queue_depth = 8;
  uint64_t chunk_bytes = 2ull << 20;
  bool register_buffers = true;
  // Speculative chunks in flight at once (0 = no cap). They are dispatched
  // only while no demand chunk is queued, so a demand read arriving finds
  // queue_depth - max_speculative_inflight slots free at worst. 1 measured
  // best on the e2e bench (docs/BENCHMARKS.md, "Prefetch gating").
  int max_speculative_inflight = 1;
};

absl::StatusOr<IoConfig::Kind> ParseIoKind(const std::string& s);

struct IoStats {
  uint64_t ops = 0;
  uint64_t bytes = 0;
  uint64_t errors = 0;
  uint64_t inflight_chunks = 0;
  uint64_t busy_ns = 0;  // wall time with at least one read in flight
  uint64_t speculative_inflight = 0;    // speculative chunks in flight now
  uint64_t speculative_high_water = 0;  // most speculative chunks ever in flight at once
  uint64_t promoted_chunks = 0;         // queued chunks Promote turned into demand
};

// The counters behind IoStats, kept the same way by every engine. Not
// thread-safe: the engine calls it under its own lock. Times are NowNs().
class IoCounters {
 public:
  void Submitted() { ++s_.ops; }
  void Started(uint64_t now_ns) {
    if (s_.inflight_chunks++ == 0) busy_since_ = now_ns;
  }
  void AddBytes(uint64_t n) { s_.bytes += n; }
  void Finished(bool ok, uint64_t now_ns) {
    if (!ok) ++s_.errors;
    if (--s_.inflight_chunks == 0) s_.busy_ns += now_ns - busy_since_;
  }
  void Promoted(uint64_t n) { s_.promoted_chunks += n; }
  uint64_t inflight() const { return s_.inflight_chunks; }
  IoStats Snapshot(uint64_t now_ns) const {
    IoStats s = s_;
    if (s.inflight_chunks > 0) s.busy_ns += now_ns - busy_since_;
    return s;
  }

 private:
  IoStats s_;
  uint64_t busy_since_ = 0;
};

class IoEngine {
 public:
  virtual ~IoEngine() = default;
  virtual void Submit(ReadOp op, ReadDone done) = 0;
  // A demand read now waits for the op(s) tagged `tag` (tag != 0): their
  // still-queued chunks become demand priority (ahead of every speculative
  // chunk, behind demand chunks queued before). Returns how many chunks
  // moved; 0 when none is queued (already in flight or done).
  virtual size_t Promote(uint64_t tag) = 0;
  virtual std::string name() const = 0;
  virtual int queue_depth() const = 0;
  // Registers fixed buffers (index i = iov[i]); OK if registered, an error
  // (and reads keep working unregistered) otherwise.
  virtual absl::Status RegisterBuffers(const std::vector<iovec>& iov) = 0;
  virtual bool buffers_registered() const = 0;
  virtual IoStats stats() const = 0;
};

// kAuto tries io_uring and falls back to the pread pool (logged).
absl::StatusOr<std::unique_ptr<IoEngine>> MakeIoEngine(const IoConfig& config);

// Blocking convenience: submit and wait.
absl::Status ReadSync(IoEngine& engine, ReadOp op);

}  // namespace moe::expertstore
