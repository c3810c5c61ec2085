#include "common/kernels/thread_pool.h"

#include <chrono>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace moe::kernels {
namespace {
inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}
}  // namespace

ThreadPool::ThreadPool(int threads, int spin_us) : spin_us_(spin_us) {
  // Workers start from generation 0 (not whatever they read when the OS gets
  // round to starting them), so a job or a stop issued before then is seen.
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::Drain() {
  for (;;) {
    const int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= tasks_) return;
    thunk_(ctx_, i);
  }
}

// Protocol (all seq_cst): a worker announces itself (active_++) BEFORE it
// checks open_; the caller closes (open_ = false) BEFORE it waits for
// active_ == 0. So a worker either is counted and the caller waits for it,
// or sees the job closed and never touches thunk_/ctx_.
void ThreadPool::RunImpl(Thunk thunk, void* ctx, int64_t n) {
  thunk_ = thunk;
  ctx_ = ctx;
  tasks_ = n;
  next_.store(0);
  open_.store(true);
  generation_.fetch_add(1);
  if (sleepers_.load() > 0) generation_.notify_all();
  Drain();
  open_.store(false);
  // Workers still counted are running a task (or about to leave): short wait.
  for (int k = 1; active_.load() != 0; ++k) {
    CpuRelax();
    if ((k & 1023) == 0) std::this_thread::yield();
  }
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us_);
    int n = 0;
    while ((gen = generation_.load()) == seen) {
      CpuRelax();
      if ((++n & 255) == 0 && std::chrono::steady_clock::now() > deadline) {
        sleepers_.fetch_add(1);
        // Re-check after announcing: RunImpl notifies only if it sees sleepers.
        if (generation_.load() == seen) generation_.wait(seen);
        sleepers_.fetch_sub(1);
      }
    }
    seen = gen;
    if (stop_.load()) return;
    active_.fetch_add(1);
    if (open_.load()) Drain();
    active_.fetch_sub(1);
  }
}

}  // namespace moe::kernels
