// Persistent fork/join pool for the kernels.
//
// Problem in numbers: a decode step issues hundreds of small matmuls (a 2048
// x 6144 int4 expert is ~125 us on 2 threads); creating threads or sleeping
// on a condition variable per call costs 20-60 us, so workers spin on an
// atomic generation counter for `spin_us` after each job and only then sleep
// (std::atomic::wait, a futex). Measured per-call overhead: docs/BENCHMARKS.md.
//
// Contract: Run(fn) calls fn(t) once for every t in [0, size()), t = 0 on the
// calling thread, and returns when all calls have returned. Which thread runs
// which t is fixed, so work split by t is deterministic.
// Thread safety: Run must not be called concurrently or re-entrantly.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
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
  void Run(F&& fn) {
    if (workers_.empty()) {
      fn(0);
      return;
    }
    RunImpl([](void* ctx, int t) { (*static_cast<F*>(ctx))(t); }, &fn);
  }

 private:
  using Thunk = void (*)(void*, int);
  void RunImpl(Thunk thunk, void* ctx);
  void WorkerLoop(int index);

  int spin_us_;
  Thunk thunk_ = nullptr;
  void* ctx_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> workers_;
};

}  // namespace moe::kernels
