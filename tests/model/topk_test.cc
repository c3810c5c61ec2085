// The DSA indexer's O(n) top-k (model_detail::TopKSetAscending) selects
// exactly the set the heap-based TopKIdx does, ties broken toward the lower
// position, for every k, with heavy ties and with k >= n.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "common/model/model_internal.h"

namespace moe {
namespace {

TEST(TopK, TheLinearSelectionIsTheHeapsSetInPositionOrder) {
  std::mt19937 rng(3);
  for (int n : {1, 5, 64, 1000, 5000}) {
    for (int distinct : {2, 17, 1 << 20}) {  // few distinct values: ties everywhere
      std::vector<float> v(n);
      for (float& x : v) x = static_cast<float>(rng() % distinct) - distinct / 2.0f;
      for (int k : {1, 2, n / 3 + 1, n - 1, n, n + 5}) {
        if (k < 1) continue;
        std::vector<int> heap = model_detail::TopKIdx(v.data(), n, std::min(k, n));
        std::sort(heap.begin(), heap.end());
        const std::vector<int32_t> got = model_detail::TopKSetAscending(v.data(), n, k);
        EXPECT_EQ(std::vector<int>(got.begin(), got.end()), heap) << "n " << n << " k " << k << " distinct " << distinct;
      }
    }
  }
}

}  // namespace
}  // namespace moe
