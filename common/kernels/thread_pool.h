// Persistent fork/join pool for the kernels.
//
// Problem in numbers: a decode step issues hundreds of small matmuls (a 2048
// x 6144 int4 expert is ~125 us on 2 threads); creating threads or sleeping
// on a condition variable per call costs 20-60 us, so workers spin on an
// atomic generation counter for `spin_us` after each job and only then sleep
// (std::atomic::wait, a futex). Measured per-call overhead: docs/BENCHMARKS.md.
//
// Contract: ParallelFor(n, fn) calls fn(i) exactly once for every task i in
// [0, n) and returns when all calls have returned. Tasks are handed out
// dynamically (an atomic counter): the caller takes tasks too, and a worker
// that wakes late (CPU oversubscribed) finds the job finished and never
// delays the caller. Which thread runs a task must not matter to the result
// (the kernels compute every output element identically on any thread).
// Thread safety: ParallelFor must not be called concurrently or re-entrantly.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

namespace moe::kernels {

class ThreadPool {
 public:
  ThreadPool(int threads, int spin_us);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  template <typename F>
  void ParallelFor(int64_t n, F&& fn) {
    if (workers_.empty() || n <= 1) {
      for (int64_t i = 0; i < n; ++i) fn(i);
      return;
    }
    using Fn = std::remove_reference_t<F>;
    RunImpl([](void* ctx, int64_t i) { (*static_cast<Fn*>(ctx))(i); }, const_cast<void*>(static_cast<const void*>(&fn)), n);
  }

 private:
  using Thunk = void (*)(void*, int64_t);
  void RunImpl(Thunk thunk, void* ctx, int64_t n);
  void Drain();  // takes tasks until none are left
  void WorkerLoop();

  int spin_us_;
  Thunk thunk_ = nullptr;
  void* ctx_ = nullptr;
  int64_t tasks_ = 0;
  std::atomic<int64_t> next_{0};
  std::atomic<bool> open_{false};   // job accepts new participants
  std::atomic<int> active_{0};      // workers inside the current job
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> workers_;
};

}  // namespace moe::kernels
