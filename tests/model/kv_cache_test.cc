// KvCache::ReadRows (the gather DSA attention reads a long context with)
// returns exactly what Read returns for each row, in the order asked, for
// both storage types.
#include "common/model/kv_cache.h"

#include <gtest/gtest.h>

#include <vector>

namespace moe {
namespace {

TEST(KvCache, ReadRowsGathersTheRowsReadWouldReturn) {
  for (KvDtype dt : {KvDtype::kF32, KvDtype::kBF16}) {
    KvCache c(4, 2, 3, {true, false}, dt);
    for (int t = 0; t < 6; ++t) {
      for (int l = 0; l < 2; ++l) {
        const float lat[4] = {t + 0.5f, -t * 1.25f, 100.0f + t, l * 1.0f};
        const float rope[2] = {t * 3.0f, -1.0f - l};
        c.Append(l, KvCache::kRope, rope);
        c.Append(l, KvCache::kLatent, lat);
        if (l == 0) {
          const float idx[3] = {1.0f * t, 2.0f, 3.0f};
          c.Append(l, KvCache::kIndexKey, idx);
        }
      }
    }
    const std::vector<int32_t> rows = {5, 0, 3, 3};
    for (auto s : {KvCache::kLatent, KvCache::kRope}) {
      const int64_t w = c.width(s);
      std::vector<float> got(rows.size() * w, -7.0f), want(w);
      c.ReadRows(1, s, rows, got.data());
      for (size_t i = 0; i < rows.size(); ++i) {
        c.Read(1, s, rows[i], 1, want.data());
        for (int64_t k = 0; k < w; ++k) EXPECT_EQ(got[i * w + k], want[k]) << "row " << rows[i] << " col " << k;
      }
    }
    std::vector<float> none(1, -7.0f);
    c.ReadRows(0, KvCache::kLatent, {}, none.data());
    EXPECT_EQ(none[0], -7.0f);  // nothing asked, nothing written
  }
}

}  // namespace
}  // namespace moe
