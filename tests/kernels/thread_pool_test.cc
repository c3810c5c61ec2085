#include "common/kernels/thread_pool.h"

#include <atomic>
#include <vector>

#include "gtest/gtest.h"

namespace moe::kernels {
namespace {

TEST(KernelsThreadPoolTest, EveryTaskRunsExactlyOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads, 50);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 2, 7, 100, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      for (int rep = 0; rep < 20; ++rep) pool.ParallelFor(n, [&](int64_t i) { hits[i]++; });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 20) << "task " << i << " threads " << threads;
    }
  }
}

// Pools created and destroyed immediately (workers may not have started yet)
// and jobs issued after the workers went to sleep must neither hang nor skip.
TEST(KernelsThreadPoolTest, ShortLivedPoolsAndSleepingWorkers) {
  for (int i = 0; i < 200; ++i) {
    ThreadPool pool(2, 0);
    if (i % 2 == 0) {
      std::atomic<int> sum{0};
      pool.ParallelFor(10, [&](int64_t t) { sum += static_cast<int>(t); });
      EXPECT_EQ(sum.load(), 45);
    }
  }
  ThreadPool pool(2, 0);  // no spinning: workers sleep right away
  for (int i = 0; i < 200; ++i) {
    std::atomic<int> count{0};
    pool.ParallelFor(5, [&](int64_t) { count++; });
    ASSERT_EQ(count.load(), 5);
  }
}

}  // namespace
}  // namespace moe::kernels
