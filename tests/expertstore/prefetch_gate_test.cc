#include "common/expertstore/prefetch_gate.h"

#include <gtest/gtest.h>

#include <cmath>

namespace moe::expertstore {
namespace {

constexpr uint64_t kS = 1000000000ull;  // ns per second

TEST(PrefetchGate, DemandBusyIsATimeDecayedAverage) {
  PrefetchGate g;  // tau 1 s
  EXPECT_DOUBLE_EQ(g.demand_busy(5 * kS), 0.0);
  g.DemandWaiting(true, 10 * kS);
  EXPECT_NEAR(g.demand_busy(11 * kS), 1 - std::exp(-1.0), 1e-9);  // one time constant of waiting
  g.DemandWaiting(false, 11 * kS);
  EXPECT_NEAR(g.demand_busy(12 * kS), (1 - std::exp(-1.0)) * std::exp(-1.0), 1e-9);
  // A 50% duty cycle (fetches wait 100 ms of every 200 ms) settles near 0.5.
  PrefetchGate h;
  for (uint64_t t = 0; t < 20 * kS; t += kS / 5) {
    h.DemandWaiting(true, kS + t);
    h.DemandWaiting(false, kS + t + kS / 10);
  }
  EXPECT_NEAR(h.demand_busy(21 * kS), 0.5, 0.05);
}

TEST(PrefetchGate, PrecisionIsADecayedShareOfUsedFills) {
  PrefetchGate g;
  EXPECT_DOUBLE_EQ(g.precision(), 0.5);  // prior: one used of two
  for (int i = 0; i < 200; ++i) g.Resolved(i % 4 != 0);  // 75% used
  EXPECT_NEAR(g.precision(), 0.75, 0.05);
  for (int i = 0; i < 100; ++i) g.Resolved(false);  // the recent past dominates
  EXPECT_LT(g.precision(), 0.01);
}

// The numbers of the e2e bench: a 10% budget keeps fetches waiting ~90% of
// the time, a 100% budget almost never; look-ahead is ~72% right.
TEST(PrefetchGate, ClosesWhenDemandSaturatesTheDiskAndReopensWhenItIdles) {
  PrefetchGate g;
  EXPECT_TRUE(g.Allow(kS));  // nothing measured yet
  for (int i = 0; i < 100; ++i) g.Resolved(i % 25 < 18);  // 72%
  uint64_t t = kS;
  for (int k = 0; k < 30; ++k, t += kS / 5) {  // 180 of every 200 ms waiting
    g.DemandWaiting(true, t);
    g.DemandWaiting(false, t + kS / 5 * 9 / 10);
  }
  EXPECT_GT(g.demand_busy(t), 0.8);
  EXPECT_FALSE(g.Allow(t));
  // Waits drop (budget raised): 10 of every 200 ms.
  for (int k = 0; k < 30; ++k, t += kS / 5) {
    g.DemandWaiting(true, t);
    g.DemandWaiting(false, t + kS / 20);
  }
  EXPECT_LT(g.demand_busy(t), 0.3);
  EXPECT_TRUE(g.Allow(t));
}

TEST(PrefetchGate, PrecisionDecidesAtModerateLoad) {
  PrefetchGate good, bad;
  for (int i = 0; i < 100; ++i) {
    good.Resolved(i % 10 != 0);  // 90%
    bad.Resolved(i % 10 < 3);    // 30%
  }
  for (uint64_t t = kS; t < 10 * kS; t += kS / 5) {  // fetches wait half the time
    for (PrefetchGate* g : {&good, &bad}) {
      g->DemandWaiting(true, t);
      g->DemandWaiting(false, t + kS / 10);
    }
  }
  EXPECT_TRUE(good.Allow(10 * kS));
  EXPECT_FALSE(bad.Allow(10 * kS));
}

TEST(PrefetchGate, DisabledAlwaysAllows) {
  PrefetchGateConfig c;
  c.enabled = false;
  PrefetchGate g(c);
  for (int i = 0; i < 50; ++i) g.Resolved(false);
  g.DemandWaiting(true, kS);
  EXPECT_TRUE(g.Allow(100 * kS));
  EXPECT_GT(g.demand_busy(100 * kS), 0.99);  // still measured, for the stats
}

}  // namespace
}  // namespace moe::expertstore
