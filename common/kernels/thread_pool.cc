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
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::RunImpl(Thunk thunk, void* ctx) {
  thunk_ = thunk;
  ctx_ = ctx;
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1);  // seq_cst: pairs with the sleeper check below
  if (sleepers_.load() > 0) generation_.notify_all();
  thunk(ctx, 0);
  // Spin for the stragglers; yield now and then so an oversubscribed CPU
  // (more runnable threads than cores) can run the worker we wait for.
  for (int n = 1; pending_.load(std::memory_order_acquire) != 0; ++n) {
    CpuRelax();
    if ((n & 1023) == 0) std::this_thread::yield();
  }
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    if (gen == seen) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us_);
      int n = 0;
      while ((gen = generation_.load(std::memory_order_acquire)) == seen) {
        CpuRelax();
        if ((++n & 255) == 0 && std::chrono::steady_clock::now() > deadline) {
          sleepers_.fetch_add(1);
          // Re-check after announcing: RunImpl notifies only if it sees sleepers.
          if (generation_.load() == seen) generation_.wait(seen);
          sleepers_.fetch_sub(1, std::memory_order_acq_rel);
        }
      }
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;
    thunk_(ctx_, index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace moe::kernels
