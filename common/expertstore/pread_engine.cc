// The pread thread-pool IoEngine (fallback when io_uring is unavailable).
#include <string.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <thread>

#include "common/expertstore/io_chunks.h"
#include "common/expertstore/io_engine.h"

namespace moe::expertstore {
namespace {

using internal::Chunk;
using internal::OpState;

uint64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class PreadEngine final : public IoEngine {
 public:
  explicit PreadEngine(const IoConfig& c) : cfg_(c), queue_(c.max_speculative_inflight) {
    int n = cfg_.queue_depth < 1 ? 1 : cfg_.queue_depth;
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~PreadEngine() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    for (auto& c : queue_.TakeAll()) {
      c.op->Fail(absl::CancelledError("io engine shut down"));
      if (c.op->ChunkDone()) c.op->Finish();
    }
  }
  void Submit(ReadOp op, ReadDone done) override {
    auto st = std::make_shared<OpState>();
    st->op = std::move(op);
    st->done = std::move(done);
    auto chunks = internal::SplitOp(st, cfg_.chunk_bytes);
    {
      std::lock_guard<std::mutex> l(mu_);
      counters_.Submitted();
      queue_.Enqueue(std::move(chunks));
    }
    cv_.notify_all();
  }
  size_t Promote(uint64_t tag) override {
    size_t n;
    {
      std::lock_guard<std::mutex> l(mu_);
      n = queue_.Promote(tag);
      counters_.Promoted(n);
    }
    if (n) cv_.notify_all();
    return n;
  }
  std::string name() const override { return "pread"; }
  int queue_depth() const override { return static_cast<int>(threads_.size()); }
  absl::Status RegisterBuffers(const std::vector<iovec>&) override {
    return absl::UnimplementedError("pread engine has no registered buffers");
  }
  bool buffers_registered() const override { return false; }
  IoStats stats() const override {
    std::lock_guard<std::mutex> l(mu_);
    IoStats s = counters_.Snapshot(NowNs());
    s.speculative_inflight = queue_.speculative_inflight();
    s.speculative_high_water = queue_.speculative_high_water();
    return s;
  }

 private:
  void Loop() {
    for (;;) {
      Chunk c;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || queue_.CanDispatch(); });
        if (stop_) return;
        c = queue_.Pop();
        counters_.Started(NowNs());
      }
      uint64_t done_bytes = 0;
      absl::Status err;
      Chunk cur = c;
      for (;;) {
        ssize_t r = ::pread(cur.op->op.fd, cur.dest, cur.len, static_cast<off_t>(cur.offset));
        if (r < 0 && errno == EINTR) continue;
        auto left = internal::ChunkResult(cur, r < 0 ? -errno : r);
        if (!left.ok()) {
          err = left.status();
          break;
        }
        done_bytes += r;
        if (*left == 0) break;
        uint64_t got = cur.len - *left;
        cur.offset += got;
        cur.dest += got;
        cur.len = *left;
      }
      {
        std::lock_guard<std::mutex> l(mu_);
        counters_.AddBytes(done_bytes);
        counters_.Finished(err.ok(), NowNs());
        queue_.Finished(c);
      }
      // A speculative chunk's end may let a queued speculative one go.
      if (c.speculative) cv_.notify_one();
      if (!err.ok()) c.op->Fail(err);
      if (c.op->ChunkDone()) c.op->Finish();
    }
  }

  IoConfig cfg_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  internal::ChunkQueue queue_;  // guarded by mu_
  std::vector<std::thread> threads_;
  bool stop_ = false;
  IoCounters counters_;  // guarded by mu_
};

}  // namespace

std::unique_ptr<IoEngine> MakePreadEngine(const IoConfig& c) { return std::make_unique<PreadEngine>(c); }

}  // namespace moe::expertstore
