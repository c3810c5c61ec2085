#include "common/expertstore/expert_table.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <random>
#include <thread>

#include "common/base/aligned_buffer.h"
#include "common/expertstore/shm_region.h"

namespace moe::expertstore {
namespace {

struct Fixture {
  ShmRegion ctl, arena;
  ExpertTable t;
  explicit Fixture(uint32_t slabs, uint32_t sessions = 4, uint64_t slab_bytes = 8192) {
    ShmGeometry g;
    g.num_layers = 4;
    g.num_experts = 16;
    g.max_sessions = sessions;
    g.classes = {{slab_bytes, slabs}};
    g.model_id = "m";
    ctl = *ShmRegion::Create("t-ctl", AlignUp(g.control_bytes(), 4096), false);
    arena = *ShmRegion::Create("t-arena", g.arena_bytes(), false);
    t = *ExpertTable::Format(ctl.data(), ctl.size(), arena.data(), arena.size(), g);
    for (uint32_t s = 0; s < sessions; ++s) t.session(s).state.store(kSessionAttached);
  }
  void Fill(uint32_t slab, int l, int e) {
    t.BeginFill(slab, l, e);
    std::memset(t.slab_data(slab), PackKey(l, e) & 0xff, t.slab(slab).capacity);
    uint64_t parts[3] = {0, 10, 20};
    t.Publish(slab, 4000, 0, 3, parts, 0);
  }
};

TEST(ExpertTable, AttachValidatesMagicAndVersion) {
  Fixture f(4);
  auto a = ExpertTable::Attach(f.ctl.data(), f.ctl.size(), f.arena.data(), f.arena.size());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->num_slabs(), 4u);
  reinterpret_cast<ShmHeader*>(f.ctl.data())->version = 99;
  auto b = ExpertTable::Attach(f.ctl.data(), f.ctl.size(), f.arena.data(), f.arena.size());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition);
  reinterpret_cast<ShmHeader*>(f.ctl.data())->magic = 1;
  EXPECT_EQ(ExpertTable::Attach(f.ctl.data(), f.ctl.size(), f.arena.data(), f.arena.size()).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(ExpertTable, LeaseHitMissAndDescriptor) {
  Fixture f(4);
  EXPECT_FALSE(f.t.TryLease(0, 1, 2).has_value());
  f.Fill(2, 1, 2);
  auto l = f.t.TryLease(0, 1, 2);
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->slab, 2u);
  EXPECT_EQ(l->length, 4000u);
  EXPECT_EQ(l->num_parts, 3u);
  EXPECT_EQ(l->part_offsets[2], 20u);
  EXPECT_EQ(l->data, f.t.slab_data(2));
  EXPECT_FALSE(f.t.TryLease(0, 1, 3).has_value());
  EXPECT_FALSE(f.t.TryLease(0, 99, 3).has_value());  // invalid key: miss, no crash
  EXPECT_EQ(f.t.LeaseCount(2), 1u);
  EXPECT_EQ(f.t.entry(1, 2).hits.load(), 1u);
  EXPECT_EQ(f.t.session(0).shm_hits.load(), 1u);
}

// Shm hits reach expertd's policy one by one, in order, per session; a
// lapped log reports what was lost and keeps the newest kHitLog entries.
TEST(ExpertTable, HitLogKeepsTheOrderOfSharedMemoryHits) {
  Fixture f(4);
  f.Fill(0, 1, 2);
  f.Fill(1, 3, 15);
  const std::vector<std::pair<int, int>> want = {{1, 2}, {3, 15}, {3, 15}, {1, 2}};
  for (auto [l, e] : want) {
    auto lease = f.t.TryLease(1, l, e);
    ASSERT_TRUE(lease.has_value());
    f.t.Release(1, lease->slab);
  }
  EXPECT_FALSE(f.t.TryLease(1, 0, 0).has_value());  // a miss is not logged
  std::vector<std::pair<int, int>> got;
  uint64_t tail = 0;
  EXPECT_EQ(f.t.DrainHitLog(1, &tail, [&](int l, int e) { got.emplace_back(l, e); }), 0u);
  EXPECT_EQ(got, want);
  EXPECT_EQ(tail, 4u);
  got.clear();
  uint64_t tail0 = 0;
  EXPECT_EQ(f.t.DrainHitLog(0, &tail0, [&](int l, int e) { got.emplace_back(l, e); }), 0u);
  EXPECT_TRUE(got.empty());  // another session's log is its own
  // Lapping: kHitLog + 5 more hits before a drain lose the oldest 5.
  for (uint32_t i = 0; i < kHitLog + 5; ++i) {
    auto lease = f.t.TryLease(1, i % 2 ? 3 : 1, i % 2 ? 15 : 2);
    ASSERT_TRUE(lease.has_value());
    f.t.Release(1, lease->slab);
  }
  tail = 4;
  size_t n = 0;
  EXPECT_EQ(f.t.DrainHitLog(1, &tail, [&](int, int) { ++n; }), 5u);
  EXPECT_EQ(n, size_t(kHitLog));
  // Reclaiming the session resets its log; a drain from an old tail restarts at 0.
  f.t.ReclaimSession(1);
  f.t.session(1).state.store(kSessionAttached);
  ASSERT_TRUE(f.t.TryLease(1, 1, 2).has_value());
  got.clear();
  EXPECT_EQ(f.t.DrainHitLog(1, &tail, [&](int l, int e) { got.emplace_back(l, e); }), 0u);
  EXPECT_EQ(got, (std::vector<std::pair<int, int>>{{1, 2}}));
}

TEST(ExpertTable, LeasedSlabIsNeverEvicted) {
  Fixture f(4);
  f.Fill(0, 0, 0);
  auto l = f.t.TryLease(1, 0, 0);
  ASSERT_TRUE(l);
  EXPECT_FALSE(f.t.TryEvict(0));
  EXPECT_EQ(CtlState(f.t.slab(0).ctl.load()), kSlabReady);
  EXPECT_TRUE(f.t.TryLease(0, 0, 0).has_value());  // still leasable after a refused eviction
  f.t.Release(0, 0);
  f.t.Release(1, 0);
  EXPECT_TRUE(f.t.TryEvict(0));
  EXPECT_EQ(f.t.entry(0, 0).slab_plus1.load(), 0u);
  EXPECT_FALSE(f.t.TryLease(0, 0, 0).has_value());
}

TEST(ExpertTable, ReclaimSessionDropsItsLeasesOnly) {
  Fixture f(4);
  f.Fill(0, 0, 0);
  ASSERT_TRUE(f.t.TryLease(1, 0, 0));
  ASSERT_TRUE(f.t.TryLease(1, 0, 0));
  ASSERT_TRUE(f.t.TryLease(2, 0, 0));
  f.t.ReclaimSession(1);
  EXPECT_EQ(f.t.LeaseCount(0), 1u);
  EXPECT_FALSE(f.t.TryEvict(0));
  f.t.ReclaimSession(2);
  EXPECT_TRUE(f.t.TryEvict(0));
}

TEST(ExpertTable, FillingSlabIsNotLeasable) {
  Fixture f(2);
  f.t.BeginFill(1, 3, 3);
  EXPECT_FALSE(f.t.TryLease(0, 3, 3).has_value());
  f.t.Abort(1);
  EXPECT_EQ(f.t.entry(3, 3).slab_plus1.load(), 0u);
  EXPECT_EQ(CtlState(f.t.slab(1).ctl.load()), kSlabFree);
}

// Readers lease random keys and check the slab's bytes belong to the key for
// the whole lease while an evictor keeps evicting and refilling slabs with
// other keys. Any eviction of a leased slab shows up as foreign bytes.
TEST(ExpertTable, StressLeasingVersusEviction) {
  constexpr uint32_t kSlabs = 6;
  Fixture f(kSlabs, 4, 4096);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> leases{0}, bad{0};
  auto fill = [&](uint32_t s, int l, int e) {
    f.t.BeginFill(s, l, e);
    uint8_t v = static_cast<uint8_t>(l * 16 + e);
    std::memset(f.t.slab_data(s), v, 4096);
    f.t.Publish(s, 4096, 0, 0, nullptr, 0);
  };
  for (uint32_t s = 0; s < kSlabs; ++s) fill(s, 0, s);
  std::vector<std::thread> readers;
  for (uint32_t r = 0; r < 3; ++r) {
    readers.emplace_back([&, r] {
      std::mt19937 rng(r);
      while (!stop.load(std::memory_order_relaxed)) {
        int l = rng() % 2, e = rng() % 8;
        auto lease = f.t.TryLease(r, l, e);
        if (!lease) continue;
        leases++;
        uint8_t v = static_cast<uint8_t>(l * 16 + e);
        for (int k = 0; k < 20; ++k) {
          const uint8_t* p = lease->data;
          if (p[0] != v || p[4095] != v || p[rng() % 4096] != v) bad++;
        }
        f.t.Release(r, lease->slab);
      }
    });
  }
  std::mt19937 rng(99);
  uint64_t evictions = 0;
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(400);
  while (std::chrono::steady_clock::now() < until) {
    uint32_t s = rng() % kSlabs;
    if (!f.t.TryEvict(s)) continue;
    ++evictions;
    int l, e;
    do {
      l = rng() % 2;
      e = rng() % 8;
    } while (f.t.entry(l, e).slab_plus1.load() != 0);
    fill(s, l, e);
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_GT(leases.load(), 1000u);
  EXPECT_GT(evictions, 100u);
  for (uint32_t s = 0; s < kSlabs; ++s) EXPECT_EQ(f.t.LeaseCount(s), 0u);
}

}  // namespace
// Huge pages: the arena either comes from the hugetlb pool (size rounded up
// to 2 MiB, usable) or, when the pool is too small (the default: root must
// reserve pages), the error says how many pages were needed and free.
TEST(ShmRegionHuge, MapsFromThePoolOrNamesWhatIsMissing) {
  auto r = ShmRegion::Create("t-huge", 3 << 20, false, /*huge_pages=*/true);
  if (r.ok()) {
    EXPECT_EQ(r->size(), 4u << 20);
    r->data()[0] = 1;
    r->data()[r->size() - 1] = 2;
    EXPECT_EQ(r->data()[0] + r->data()[r->size() - 1], 3);
    auto m = ShmRegion::Map(::dup(r->fd()), r->size(), false);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->data()[r->size() - 1], 2);
  } else {
    EXPECT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
    EXPECT_NE(r.status().message().find("2 huge pages of 2 MiB needed"), std::string::npos) << r.status();
    EXPECT_NE(r.status().message().find("nr_hugepages"), std::string::npos) << r.status();
  }
}

}  // namespace moe::expertstore
