#include "common/expertstore/store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <random>
#include <thread>

#include "common/expertstore/page_cache_probe.h"
#include "tests/expertstore/synthetic_model.h"

namespace moe::expertstore {
namespace {

using testing::CheckRecordBytes;
using testing::MakeTempDir;
using testing::WriteSyntheticModel;

constexpr uint64_t kRec = 48 * 1024 + 100;  // 52 KiB slabs
constexpr uint64_t kSlab = 52 * 1024;

std::unique_ptr<ExpertStore> MakeStore(const testing::SyntheticModel& m, uint64_t slabs, StoreConfig c = {}) {
  auto loc = ManifestLocator::Load(m.manifest);
  EXPECT_TRUE(loc.ok()) << loc.status();
  c.budget_bytes = slabs * kSlab;
  c.top_k = 2;
  c.io.queue_depth = 4;
  c.io.chunk_bytes = 16384;
  if (c.wait_ms == 10000) c.wait_ms = 300;
  auto st = ExpertStore::Create(std::move(*loc), c);
  EXPECT_TRUE(st.ok()) << st.status();
  return st.ok() ? std::move(*st) : nullptr;
}

TEST(ExpertStore, FetchReadsVerifiesAndLeases) {
  auto m = WriteSyntheticModel(MakeTempDir("store"), 3, 8, [](int, int) { return kRec; });
  auto st = MakeStore(m, 10);
  auto sess = st->OpenSession(getpid());
  ASSERT_TRUE(sess.ok());
  auto r = st->Fetch(sess->index, 1, {0, 5, 7});
  for (size_t i = 0; i < r.size(); ++i) {
    ASSERT_TRUE(r[i].ok()) << r[i].status();
    Lease l;
    st->table().Describe(*r[i], &l);
    EXPECT_EQ(l.layer, 1);
    EXPECT_EQ(l.length, kRec);
    EXPECT_TRUE(CheckRecordBytes(l.data, 1, std::vector<int>{0, 5, 7}[i], kRec));
    st->table().Release(sess->index, *r[i]);
  }
  // Now a shared-memory hit, no store call.
  auto hit = st->table().TryLease(sess->index, 1, 5);
  ASSERT_TRUE(hit);
  EXPECT_TRUE(CheckRecordBytes(hit->data, 1, 5, kRec));
  st->table().Release(sess->index, hit->slab);
  auto stats = st->Stats();
  EXPECT_EQ(stats.requests, 3u);
  EXPECT_EQ(stats.tier[int(TierId::kDisk)].hits + stats.tier[int(TierId::kPageCache)].hits, 3u);
  EXPECT_EQ(stats.shm_hits, 1u);
  EXPECT_EQ(stats.slabs_ready, 3u);
}

// FetchEach (the streaming FetchExperts): the resident ids come first, in one
// report, after the misses' reads were started; then every miss, each index
// exactly once, with its own bytes.
TEST(ExpertStore, FetchEachReportsResidentIdsFirstThenEachMissOnce) {
  auto m = WriteSyntheticModel(MakeTempDir("store_each"), 2, 8, [](int, int) { return kRec; });
  StoreConfig c;
  c.page_cache_tier = false;
  auto st = MakeStore(m, 10, c);
  auto sess = st->OpenSession(getpid());
  ASSERT_TRUE(sess.ok());
  for (auto& r : st->Fetch(sess->index, 1, {2, 6})) {
    ASSERT_TRUE(r.ok()) << r.status();
    st->table().Release(sess->index, *r);
  }
  const std::vector<int> ids = {0, 6, 3, 2, 5};
  std::vector<std::vector<size_t>> reports;
  std::vector<int> seen(ids.size(), 0);
  st->FetchEach(sess->index, 1, ids, [&](std::span<const std::pair<size_t, absl::StatusOr<uint32_t>>> done) {
    reports.emplace_back();
    for (const auto& [i, r] : done) {
      ASSERT_LT(i, ids.size());
      ++seen[i];
      reports.back().push_back(i);
      ASSERT_TRUE(r.ok()) << r.status();
      Lease l;
      st->table().Describe(*r, &l);
      EXPECT_TRUE(CheckRecordBytes(l.data, 1, ids[i], kRec)) << "id " << ids[i];
      st->table().Release(sess->index, *r);
    }
  });
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(seen[i], 1) << "index " << i;
  ASSERT_GE(reports.size(), 2u);
  EXPECT_EQ(reports[0], (std::vector<size_t>{1, 3}));  // ids 6 and 2 were resident
  // A bad id is reported with the resident ones, failing only itself.
  std::vector<absl::StatusOr<uint32_t>> got(3, absl::UnknownError("none"));
  st->FetchEach(sess->index, 1, {6, 99, 7}, [&](std::span<const std::pair<size_t, absl::StatusOr<uint32_t>>> done) {
    for (const auto& [i, r] : done) got[i] = r;
  });
  EXPECT_TRUE(got[0].ok());
  EXPECT_FALSE(got[1].ok());
  EXPECT_TRUE(got[2].ok());
  for (auto& r : got)
    if (r.ok()) st->table().Release(sess->index, *r);
}

// A worker that releases each expert once used (the pipelined engine) can
// fetch a layer wider than the cache: the store hands over the finished
// reads while it waits for a slab, and the releases free slabs for the rest.
TEST(ExpertStore, FetchEachServesMoreIdsThanSlabsWhenEachIsReleasedOnArrival) {
  auto m = WriteSyntheticModel(MakeTempDir("store_wide"), 2, 8, [](int, int) { return kRec; });
  StoreConfig c;
  c.page_cache_tier = false;
  c.wait_ms = 500;
  auto st = MakeStore(m, 2, c);  // 2 slabs, the top-k floor
  auto sess = st->OpenSession(getpid());
  ASSERT_TRUE(sess.ok());
  const std::vector<int> ids = {1, 4, 7, 0, 3};
  int ok = 0;
  st->FetchEach(sess->index, 0, ids, [&](std::span<const std::pair<size_t, absl::StatusOr<uint32_t>>> done) {
    for (const auto& [i, r] : done) {
      ASSERT_TRUE(r.ok()) << r.status();
      Lease l;
      st->table().Describe(*r, &l);
      EXPECT_TRUE(CheckRecordBytes(l.data, 0, ids[i], kRec));
      st->table().Release(sess->index, *r);
      ++ok;
    }
  });
  EXPECT_EQ(ok, 5);
  // The batch form holds every lease until the end, so it cannot.
  auto held = st->Fetch(sess->index, 1, {1, 2, 3});
  EXPECT_TRUE(held[0].ok() && held[1].ok());
  EXPECT_TRUE(absl::IsResourceExhausted(held[2].status())) << held[2].status();
}

// The page-cache tier serves a record the OS already caches, and only such a record: a miss is read
// once, with O_DIRECT, and stays out of the page cache (a buffered RWF_NOWAIT try would have started
// readahead of all of it: read twice, and charged to the memory cgroup; page_cache_probe.h).
TEST(ExpertStore, PageCacheTierServesCachedRecordsAndLeavesMissesOutOfTheCache) {
  constexpr uint64_t kBig = 1024 * 1024 + 4096;  // 257 pages: readahead would be visible
  auto m = WriteSyntheticModel(MakeTempDir("store_pc"), 2, 4, [](int, int) { return kBig; }, 1);
  const int fd = ::open(m.files[0].c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ::fsync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  auto probe = PageCacheProbe::Open(fd);
  ASSERT_TRUE(probe.ok()) << probe.status();
  auto rec = [&](int l, int e) {
    for (const auto& [k, loc] : m.recs)
      if (k == std::pair{l, e}) return loc;
    ADD_FAILURE() << "no record " << l << "," << e;
    return RecordLocation{};
  };
  if ((*probe)->Cached(0, rec(0, 0).length)) GTEST_SKIP() << "this file system keeps dropped pages (tmpfs?)";
  // Record (1, 2) goes into the page cache by an ordinary buffered read.
  const RecordLocation hot = rec(1, 2);
  std::vector<uint8_t> tmp(hot.length);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);  // no readahead into the neighbours
  ASSERT_EQ(::pread(fd, tmp.data(), tmp.size(), hot.offset), static_cast<ssize_t>(tmp.size()));
  ASSERT_TRUE((*probe)->Cached(hot.offset, hot.length));

  StoreConfig c;
  c.page_cache_tier = true;
  auto loc = ManifestLocator::Load(m.manifest);
  ASSERT_TRUE(loc.ok()) << loc.status();
  c.budget_bytes = 4 * AlignUp(kBig, 4096);
  c.top_k = 2;
  auto st = ExpertStore::Create(std::move(*loc), c);
  ASSERT_TRUE(st.ok()) << st.status();
  auto sess = (*st)->OpenSession(getpid());
  ASSERT_TRUE(sess.ok());
  for (const auto& [l, e] : {std::pair{0, 1}, std::pair{1, 2}}) {
    auto r = (*st)->Fetch(sess->index, l, {e});
    ASSERT_TRUE(r[0].ok()) << r[0].status();
    Lease x;
    (*st)->table().Describe(*r[0], &x);
    EXPECT_TRUE(CheckRecordBytes(x.data, l, e, kBig));
    (*st)->table().Release(sess->index, *r[0]);
  }
  const auto s = (*st)->Stats();
  EXPECT_EQ(s.tier[int(TierId::kPageCache)].hits, 1u);
  EXPECT_EQ(s.tier[int(TierId::kDisk)].hits, 1u);
  const int dfd = ::open(m.files[0].c_str(), O_RDONLY | O_DIRECT);
  if (dfd < 0) GTEST_SKIP() << "O_DIRECT refused here: the disk read went through the page cache";
  ::close(dfd);
  const RecordLocation miss = rec(0, 1);
  EXPECT_FALSE((*probe)->Cached(miss.offset, 4096)) << "the miss was read into the page cache";
  EXPECT_FALSE((*probe)->Cached(miss.offset + miss.length - 4096, 4096)) << "the miss was read ahead";
  ::close(fd);
}

TEST(ExpertStore, EvictsUnderASmallBudgetAndStillReturnsCorrectBytes) {
  auto m = WriteSyntheticModel(MakeTempDir("store_small"), 4, 8, [](int, int) { return kRec; });
  StoreConfig c;
  c.page_cache_tier = false;  // force the O_DIRECT path
  auto st = MakeStore(m, 4, c);
  auto sess = st->OpenSession(1);
  for (int round = 0; round < 3; ++round) {
    for (int l = 0; l < 4; ++l) {
      auto r = st->Fetch(sess->index, l, {l, (l + 3) % 8});
      for (size_t i = 0; i < 2; ++i) {
        ASSERT_TRUE(r[i].ok()) << r[i].status();
        Lease x;
        st->table().Describe(*r[i], &x);
        EXPECT_TRUE(CheckRecordBytes(x.data, l, i == 0 ? l : (l + 3) % 8, kRec));
        st->table().Release(sess->index, *r[i]);
      }
    }
  }
  auto s = st->Stats();
  EXPECT_GT(s.evictions, 0u);
  EXPECT_LE(s.slabs_ready, 4u);
  EXPECT_GT(s.tier[int(TierId::kDisk)].bytes, 0u);
  EXPECT_EQ(s.policy_resident, s.slabs_ready + s.slabs_filling);  // the policy's eviction order covers them all
}

TEST(ExpertStore, LeasedSlabsBlockEvictionUntilReleased) {
  auto m = WriteSyntheticModel(MakeTempDir("store_lease"), 2, 8, [](int, int) { return kRec; });
  auto st = MakeStore(m, 2);
  auto sess = st->OpenSession(1);
  auto a = st->Fetch(sess->index, 0, {0, 1});
  ASSERT_TRUE(a[0].ok() && a[1].ok());
  auto b = st->Fetch(sess->index, 0, {2});  // both slabs leased: waits, then refuses
  EXPECT_EQ(b[0].status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(std::string(b[0].status().message()).find("leased"), std::string::npos);
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    st->table().Release(sess->index, *a[0]);
  });
  auto c = st->Fetch(sess->index, 0, {2});
  releaser.join();
  ASSERT_TRUE(c[0].ok()) << c[0].status();
  EXPECT_EQ(*c[0], *a[0]);
  Lease l;
  st->table().Describe(*a[1], &l);
  EXPECT_TRUE(CheckRecordBytes(l.data, 0, 1, kRec));  // the still-leased one is intact
}

// A prefill pass (FetchUse::kPrefill) streams a whole layer through the
// cache without evicting the decode working set: its experts count as no
// access, and its misses take free slabs, then the slabs it filled itself
// (released as each expert is computed), and of the decode set's at most
// top_k. The same pass as decode fetches evicts the working set (the test
// can fail).
TEST(ExpertStore, PrefillFetchesStreamWithoutEvictingTheDecodeWorkingSet) {
  auto m = WriteSyntheticModel(MakeTempDir("store_prefill"), 2, 8, [](int, int) { return kRec; });
  auto run = [&](uint64_t slabs, ExpertStore::FetchUse use, StoreStats* stats) {
    StoreConfig c;
    c.page_cache_tier = false;
    c.wait_ms = 2000;
    auto st = MakeStore(m, slabs, c);
    auto sess = st->OpenSession(getpid());
    EXPECT_TRUE(sess.ok());
    // The decode working set: layer 0's experts 0-3, token after token.
    for (int k = 0; k < 20; ++k) {
      for (auto& r : st->Fetch(sess->index, 0, {0, 1, 2, 3})) {
        EXPECT_TRUE(r.ok()) << r.status();
        st->table().Release(sess->index, *r);
      }
    }
    // A prompt chunk routes to every expert of layer 1, each computed and released on arrival.
    const std::vector<int> ids = {0, 1, 2, 3, 4, 5, 6, 7};
    int ok = 0;
    st->FetchEach(
        sess->index, 1, ids,
        [&](std::span<const std::pair<size_t, absl::StatusOr<uint32_t>>> done) {
          for (const auto& [i, r] : done) {
            ASSERT_TRUE(r.ok()) << r.status();
            Lease l;
            st->table().Describe(*r, &l);
            EXPECT_TRUE(CheckRecordBytes(l.data, 1, ids[i], kRec));
            st->table().Release(sess->index, *r);
            ++ok;
          }
        },
        use);
    EXPECT_EQ(ok, 8);
    *stats = st->Stats();
    auto heat = st->Heat();
    int kept = 0;
    for (int e = 0; e < 4; ++e) kept += heat[e].resident ? 1 : 0;
    return kept;
  };
  StoreStats s;
  // 6 slabs: the working set and 2 free ones, which the pass recycles.
  EXPECT_EQ(run(6, ExpertStore::FetchUse::kPrefill, &s), 4);
  EXPECT_EQ(s.prefill_requests, 8u);
  EXPECT_EQ(s.prefill_fills, 8u);
  EXPECT_EQ(s.prefill_decode_evictions, 0u);
  // 4 slabs, all the working set's: the pass takes top_k (2) of them, no more.
  EXPECT_EQ(run(4, ExpertStore::FetchUse::kPrefill, &s), 2);
  EXPECT_EQ(s.prefill_decode_evictions, 2u);
  // As decode fetches, the same pass evicts the working set.
  EXPECT_LT(run(6, ExpertStore::FetchUse::kDecode, &s), 4);
  EXPECT_EQ(s.prefill_requests, 0u);
}

TEST(ExpertStore, CorruptRecordFailsOnlyThatRequest) {
  auto m = WriteSyntheticModel(MakeTempDir("store_corrupt"), 2, 4, [](int, int) { return kRec; }, 1);
  const auto& bad = m.recs[5].second;  // (layer 1, expert 1)
  int fd = ::open(m.files[0].c_str(), O_WRONLY);
  uint8_t x = 0x5a;
  ASSERT_EQ(::pwrite(fd, &x, 1, bad.offset + 777), 1);
  ::close(fd);
  auto st = MakeStore(m, 6);
  auto sess = st->OpenSession(1);
  auto r = st->Fetch(sess->index, 1, {0, 1, 2});
  EXPECT_TRUE(r[0].ok());
  EXPECT_TRUE(r[2].ok());
  ASSERT_FALSE(r[1].ok());
  EXPECT_EQ(r[1].status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(std::string(r[1].status().message()).find("checksum mismatch"), std::string::npos);
  EXPECT_NE(std::string(r[1].status().message()).find("shard-0.bin"), std::string::npos);
  EXPECT_EQ(st->Stats().read_errors, 1u);
  auto again = st->Fetch(sess->index, 0, {3});  // still serving
  EXPECT_TRUE(again[0].ok());
  // The failed fill's slab is free again and left the policy's order with it.
  auto s = st->Stats();
  EXPECT_EQ(s.slabs_ready, 3u);
  EXPECT_EQ(s.policy_resident, s.slabs_ready + s.slabs_filling);
}

TEST(ExpertStore, TruncatedShardIsAShortReadError) {
  auto m = WriteSyntheticModel(MakeTempDir("store_trunc"), 2, 4, [](int, int) { return kRec; }, 1);
  const auto& last = m.recs.back().second;
  ASSERT_EQ(::truncate(m.files[0].c_str(), last.offset + 8192), 0);
  StoreConfig c;
  c.page_cache_tier = false;
  auto st = MakeStore(m, 6, c);
  auto sess = st->OpenSession(1);
  auto r = st->Fetch(sess->index, 1, {3, 0});
  EXPECT_EQ(r[0].status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(std::string(r[0].status().message()).find("short read"), std::string::npos) << r[0].status();
  EXPECT_TRUE(r[1].ok());
}

TEST(ExpertStore, InvalidIdsAreRejected) {
  auto m = WriteSyntheticModel(MakeTempDir("store_invalid"), 2, 4, [](int, int) { return kRec; });
  auto st = MakeStore(m, 4);
  auto sess = st->OpenSession(1);
  auto r = st->Fetch(sess->index, 1, {4, -1, 2});
  EXPECT_EQ(r[0].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r[1].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(r[2].ok());
  auto bad_layer = st->Fetch(sess->index, 7, {0});
  EXPECT_EQ(bad_layer[0].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(bad_layer[0].status().message()).find("layer 7"), std::string::npos);
  auto no_session = st->Fetch(9, 0, {0});
  EXPECT_EQ(no_session[0].status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ExpertStore, BudgetBelowOneLayersTopKIsRefused) {
  auto m = WriteSyntheticModel(MakeTempDir("store_budget"), 2, 4, [](int, int) { return kRec; });
  auto loc = ManifestLocator::Load(m.manifest);
  StoreConfig c;
  c.top_k = 3;
  c.budget_bytes = 2 * kSlab;
  auto st = ExpertStore::Create(std::move(*loc), c);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.status().message()).find("top-3"), std::string::npos) << st.status();
}

TEST(ExpertStore, SizeClassesKeepLargeAndSmallRecordsApart) {
  // Layer 2 is an "int8 MTP" layer with records twice as large.
  auto m = WriteSyntheticModel(MakeTempDir("store_classes"), 3, 4,
                               [](int l, int) { return l == 2 ? 2 * kRec : kRec; });
  auto loc = ManifestLocator::Load(m.manifest);
  StoreConfig c;
  c.top_k = 2;
  c.budget_bytes = 12 * kSlab;
  auto st = ExpertStore::Create(std::move(*loc), c);
  ASSERT_TRUE(st.ok()) << st.status();
  const auto& h = (*st)->table().header();
  ASSERT_EQ(h.num_classes, 2u);
  EXPECT_GE(h.classes[0].slab_bytes, 2 * kRec);
  EXPECT_GE(h.classes[0].num_slabs, 2u);
  EXPECT_LE(h.arena_bytes, c.budget_bytes);
  auto sess = (*st)->OpenSession(1);
  auto r = (*st)->Fetch(sess->index, 2, {0, 1});
  ASSERT_TRUE(r[0].ok() && r[1].ok());
  Lease l;
  (*st)->table().Describe(*r[1], &l);
  EXPECT_TRUE(CheckRecordBytes(l.data, 2, 1, 2 * kRec));
}

TEST(ExpertStore, HintPrefetchesAndRespectsAdmission) {
  auto m = WriteSyntheticModel(MakeTempDir("store_hint"), 2, 8, [](int, int) { return kRec; });
  auto st = MakeStore(m, 3);
  auto sess = st->OpenSession(1);
  EXPECT_EQ(st->Hint(0, {1, 2}), 2);
  // Wait until the prefetches land, then the fetch is a RAM hit.
  for (int i = 0; i < 200 && st->Stats().slabs_ready < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  auto r = st->Fetch(sess->index, 0, {1, 2});
  ASSERT_TRUE(r[0].ok() && r[1].ok());
  auto s = st->Stats();
  EXPECT_EQ(s.prefetch_issued, 2u);
  EXPECT_EQ(s.prefetch_used, 2u);
  EXPECT_EQ(s.tier[int(TierId::kRam)].hits, 2u);
  st->table().Release(sess->index, *r[0]);
  st->table().Release(sess->index, *r[1]);
  // Make everything hot, then a hint for a cold expert must not evict them.
  for (int k = 0; k < 20; ++k) {
    auto x = st->Fetch(sess->index, 0, {1, 2, 3});
    for (auto& y : x) st->table().Release(sess->index, *y);
  }
  EXPECT_EQ(st->Hint(1, {7}), 0);
  EXPECT_GE(st->Stats().prefetch_refused, 1u);
  auto heat = st->Heat();
  EXPECT_TRUE(heat[1].resident && heat[2].resident && heat[3].resident);
  EXPECT_FALSE(heat[8 + 7].resident);
}

// A look-ahead hint for a resident expert keeps it through the current
// layer's fills (which would evict it: it is the coldest), until its own
// layer runs.
TEST(ExpertStore, LookaheadHintKeepsAResidentExpertThroughTheCurrentLayersFills) {
  auto m = WriteSyntheticModel(MakeTempDir("store_keep"), 2, 8, [](int, int) { return kRec; });
  auto st = MakeStore(m, 3);
  auto sess = st->OpenSession(1);
  auto fetch = [&](int layer, std::vector<int> ids) {
    auto r = st->Fetch(sess->index, layer, ids);
    for (auto& x : r) {
      ASSERT_TRUE(x.ok()) << x.status();
      st->table().Release(sess->index, *x);
    }
  };
  fetch(1, {5});
  for (int k = 0; k < 10; ++k) fetch(0, {0, 1});
  EXPECT_EQ(st->Hint(1, {5}, /*lookahead=*/true), 0);  // resident: nothing to read
  EXPECT_EQ(st->Stats().lookahead_kept, 1u);
  fetch(0, {2});  // evicts a hot layer-0 expert, not the predicted (1, 5)
  auto heat = st->Heat();
  EXPECT_TRUE(heat[8 + 5].resident);
  EXPECT_EQ(int(heat[0].resident) + int(heat[1].resident), 1);
  const uint64_t ram_hits = st->Stats().tier[int(TierId::kRam)].hits;
  fetch(1, {5});  // its layer ran (a RAM hit)...
  EXPECT_EQ(st->Stats().tier[int(TierId::kRam)].hits, ram_hits + 1);
  for (int k = 0; k < 10; ++k) fetch(0, {0, 2});
  fetch(0, {3});  // ...so now it is the coldest again
  EXPECT_FALSE(st->Heat()[8 + 5].resident);
}

TEST(ExpertStore, CurrentRoutingHintsFillLikeDemandLookaheadHintsAreGated) {
  auto m = WriteSyntheticModel(MakeTempDir("store_hint_kinds"), 2, 8, [](int, int) { return kRec; });
  StoreConfig c;
  c.max_prefetch_inflight = 1;
  auto st = MakeStore(m, 3, c);
  auto sess = st->OpenSession(1);
  for (int k = 0; k < 20; ++k) {
    auto x = st->Fetch(sess->index, 0, {1, 2, 3});
    for (auto& y : x) st->table().Release(sess->index, *y);
  }
  // A look-ahead prediction of a cold expert may not evict hot ones...
  EXPECT_EQ(st->Hint(1, {7}, /*lookahead=*/true), 0);
  EXPECT_EQ(st->Stats().prefetch_refused, 1u);
  // ...the current token's routing (certain) is filled like a demand miss.
  EXPECT_EQ(st->Hint(1, {7}, /*lookahead=*/false), 1);
  for (int i = 0; i < 200 && !st->Heat()[8 + 7].resident; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_TRUE(st->Heat()[8 + 7].resident);
  auto r = st->Fetch(sess->index, 1, {7});
  ASSERT_TRUE(r[0].ok());
  st->table().Release(sess->index, *r[0]);
  EXPECT_EQ(st->Stats().prefetch_used, 1u);
  // Look-ahead reads are capped (max_prefetch_inflight 1); current ones are not.
  const auto before = st->Stats().prefetch_issued;
  const int la = st->Hint(1, {4, 5, 6}, /*lookahead=*/true);
  EXPECT_LE(la, 1);
  for (int i = 0; i < 200 && st->Stats().io_inflight > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(st->Stats().prefetch_issued, before + uint64_t(la));
}

// The prefetch gate's precision: a look-ahead fill counts as used when a
// fetch takes it or a worker leases it in shared memory, as unused when its
// slab is evicted first.
TEST(ExpertStore, LookaheadPrecisionCountsFetchAndShmUseAndUnusedEvictions) {
  auto m = WriteSyntheticModel(MakeTempDir("store_precision"), 2, 8, [](int, int) { return kRec; });
  StoreConfig c;
  c.prefetch_gate.precision_decay = 1.0;  // plain counts: (1 + used) / (2 + resolved)
  auto st = MakeStore(m, 3, c);
  auto sess = st->OpenSession(1);
  EXPECT_DOUBLE_EQ(st->Stats().prefetch_precision, 0.5);
  ASSERT_EQ(st->Hint(0, {1, 2}), 2);
  for (int i = 0; i < 500 && st->Stats().slabs_ready < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  auto r = st->Fetch(sess->index, 0, {1});  // used by a fetch (a hit, or joining the read)
  ASSERT_TRUE(r[0].ok());
  st->table().Release(sess->index, *r[0]);
  EXPECT_NEAR(st->Stats().prefetch_precision, 2.0 / 3, 1e-9);
  auto l = st->table().TryLease(sess->index, 0, 2);  // used in shared memory
  ASSERT_TRUE(l);
  st->table().Release(sess->index, l->slab);
  std::this_thread::sleep_for(std::chrono::milliseconds(25));  // past the harvest interval
  st->Maintain();
  EXPECT_NEAR(st->Stats().prefetch_precision, 3.0 / 4, 1e-9);
  EXPECT_EQ(st->Stats().prefetch_used, 2u);
  ASSERT_EQ(st->Hint(1, {5}), 1);  // the third slab, never used:
  for (int i = 0; i < 500 && st->Stats().slabs_ready < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  auto x = st->Fetch(sess->index, 0, {3, 4, 5});  // needs all three slabs at once
  for (auto& y : x) {
    ASSERT_TRUE(y.ok()) << y.status();
    st->table().Release(sess->index, *y);
  }
  EXPECT_NEAR(st->Stats().prefetch_precision, 3.0 / 5, 1e-9);
}

// While fetches wait for the disk (here: for a slab, every one of the class
// leased) most of the time and precision is no better, look-ahead hints that
// would evict are not read; one into a free slab (another size class here)
// still is. The gate reopens once the waits stop. With the gate off, hints
// are tried as before.
TEST(ExpertStore, PrefetchGateStopsLookaheadReadsWhileFetchesWait) {
  // Layer 1's records are twice as large: their own size class.
  auto m = WriteSyntheticModel(MakeTempDir("store_gate"), 2, 8, [](int l, int) { return l == 1 ? 2 * kRec : kRec; });
  for (bool enabled : {true, false}) {
    auto loc = ManifestLocator::Load(m.manifest);
    ASSERT_TRUE(loc.ok());
    StoreConfig c;
    c.top_k = 2;
    c.budget_bytes = 2 * AlignUp(2 * kRec, 4096) + 2 * kSlab;  // 2 large + 2 small slabs
    c.prefetch_gate.enabled = enabled;
    c.prefetch_gate.busy_tau_s = 0.005;  // the test's time scale
    c.wait_ms = 5000;
    auto created = ExpertStore::Create(std::move(*loc), c);
    ASSERT_TRUE(created.ok()) << created.status();
    auto& st = *created;
    ASSERT_EQ(st->table().header().num_classes, 2u);
    auto sess = st->OpenSession(1);
    auto a = st->Fetch(sess->index, 1, {0, 1});  // both large slabs leased
    ASSERT_TRUE(a[0].ok() && a[1].ok());
    std::thread waiter([&] {
      auto b = st->Fetch(sess->index, 1, {2});
      ASSERT_TRUE(b[0].ok()) << b[0].status();
      st->table().Release(sess->index, *b[0]);
    });
    for (int i = 0; i < 1000 && st->Stats().demand_busy < 0.95; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ASSERT_GE(st->Stats().demand_busy, 0.95);
    EXPECT_EQ(st->Stats().prefetch_gate_open, !enabled);
    EXPECT_EQ(st->Hint(1, {3, 4}, /*lookahead=*/true), 0);
    auto s = st->Stats();
    EXPECT_EQ(s.prefetch_gated, enabled ? 2u : 0u);
    EXPECT_EQ(s.prefetch_refused, enabled ? 0u : 2u);  // tried: no slab to take
    EXPECT_EQ(st->Hint(0, {3}, /*lookahead=*/true), 1);  // a free small slab: evicts nothing
    st->table().Release(sess->index, *a[0]);
    st->table().Release(sess->index, *a[1]);
    waiter.join();
    for (int i = 0; i < 1000 && st->Stats().demand_busy > 0.05; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    EXPECT_TRUE(st->Stats().prefetch_gate_open);
  }
}

TEST(ExpertStore, PinnedExpertsStayAndSessionCloseReleasesLeases) {
  auto m = WriteSyntheticModel(MakeTempDir("store_pin"), 2, 8, [](int, int) { return kRec; });
  auto st = MakeStore(m, 2);
  auto sess = st->OpenSession(1);
  ASSERT_TRUE(st->Pin(0, 0, true).ok());
  EXPECT_EQ(st->Pin(5, 0, true).code(), absl::StatusCode::kInvalidArgument);
  auto a = st->Fetch(sess->index, 0, {0});
  st->table().Release(sess->index, *a[0]);
  for (int e = 1; e < 6; ++e) {
    auto r = st->Fetch(sess->index, 1, {e});
    ASSERT_TRUE(r[0].ok());
    st->table().Release(sess->index, *r[0]);
  }
  EXPECT_TRUE(st->Heat()[0].resident);
  // A session holding leases goes away: its leases go with it.
  auto s2 = st->OpenSession(2);
  auto held = st->Fetch(s2->index, 1, {6});
  ASSERT_TRUE(held[0].ok());
  EXPECT_EQ(st->table().LeaseCount(*held[0]), 1u);
  st->CloseSession(s2->index);
  EXPECT_EQ(st->table().LeaseCount(*held[0]), 0u);
  EXPECT_FALSE(st->CheckSession(s2->index, s2->token).ok());
}

// Four worker threads, each its own session, lease hits from shared memory
// and fetch misses the way RemoteExpertSource does, with look-ahead hints,
// under a budget that evicts on nearly every miss, while a fifth thread runs
// the service's periodic work and admin reads. Every leased slab must hold
// the right record for as long as it is leased (checked before release).
// Run under ThreadSanitizer too (docs/EXPERTD.md).
TEST(ExpertStore, ConcurrentSessionsUnderEvictionReadTheRightBytes) {
  constexpr int kLayers = 4, kExperts = 8, kThreads = 4, kIters = 150;
  auto m = WriteSyntheticModel(MakeTempDir("store_conc"), kLayers, kExperts, [](int, int) { return kRec; });
  StoreConfig c;
  c.wait_ms = 5000;  // a miss may wait for another thread's lease to end
  auto st = MakeStore(m, kThreads * 2 + 2, c);  // at most 8 slabs leased or filling at once
  ASSERT_TRUE(st);
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0}, errors{0}, shm_hits{0};
  std::thread admin([&] {
    while (!stop.load()) {
      st->Maintain();
      (void)st->Stats();
      (void)st->Heat();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  std::vector<std::thread> workers;
  for (int w = 0; w < kThreads; ++w) {
    workers.emplace_back([&, w] {
      auto sess = st->OpenSession(getpid());
      if (!sess.ok()) {
        ++errors;
        return;
      }
      std::mt19937 rng(w + 1);
      for (int it = 0; it < kIters; ++it) {
        const int layer = it % kLayers;
        const int a = int(rng() % kExperts), b = (a + 1 + int(rng() % (kExperts - 1))) % kExperts;
        std::vector<int> ids{a, b}, miss;
        std::vector<uint32_t> slabs;
        for (int e : ids) {
          if (auto hit = st->table().TryLease(sess->index, layer, e)) {
            if (!CheckRecordBytes(hit->data, layer, e, kRec)) ++bad;
            slabs.push_back(hit->slab);
            ++shm_hits;
          } else {
            miss.push_back(e);
          }
        }
        if (it % 3 == 0) st->Hint((layer + 1) % kLayers, {int(rng() % kExperts), int(rng() % kExperts)});
        auto got = st->Fetch(sess->index, layer, miss);
        for (size_t i = 0; i < got.size(); ++i) {
          if (!got[i].ok()) {
            ++errors;
            continue;
          }
          Lease l;
          st->table().Describe(*got[i], &l);
          if (l.layer != layer || l.expert != miss[i] || !CheckRecordBytes(l.data, layer, miss[i], kRec)) ++bad;
          slabs.push_back(*got[i]);
        }
        for (uint32_t s : slabs) st->table().Release(sess->index, s);
      }
      st->CloseSession(sess->index);
    });
  }
  for (auto& t : workers) t.join();
  stop = true;
  admin.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(errors.load(), 0);
  auto s = st->Stats();  // ~970 of the 1,200 accesses miss, ~1,070 evictions
  EXPECT_GT(s.requests, uint64_t(kThreads * kIters * 2 / 2));
  EXPECT_GT(s.evictions, uint64_t(kThreads * kIters * 2 / 2));
  EXPECT_GT(shm_hits.load(), 0);
  for (uint32_t slab = 0; slab < st->table().num_slabs(); ++slab) EXPECT_EQ(st->table().LeaseCount(slab), 0u) << slab;
  EXPECT_EQ(s.policy_resident, s.slabs_ready + s.slabs_filling);
}

TEST(ExpertStore, SetBudgetShrinksAndGrowsActiveSlabs) {
  auto m = WriteSyntheticModel(MakeTempDir("store_setbudget"), 2, 8, [](int, int) { return kRec; });
  auto st = MakeStore(m, 8);
  auto sess = st->OpenSession(1);
  for (int e = 0; e < 8; ++e) {
    auto r = st->Fetch(sess->index, 0, {e});
    st->table().Release(sess->index, *r[0]);
  }
  auto b = st->SetBudget(4 * kSlab);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, 4 * kSlab);
  auto s = st->Stats();
  EXPECT_EQ(s.slabs_active, 4u);
  EXPECT_LE(s.slabs_ready, 4u);
  EXPECT_EQ(s.policy_resident, s.slabs_ready + s.slabs_filling);  // disabled slabs' keys left the policy's order
  EXPECT_EQ(st->SetBudget(100 * kSlab).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(st->SetBudget(8 * kSlab).ok());
  EXPECT_EQ(st->Stats().slabs_active, 8u);
  for (int e = 0; e < 8; ++e) {  // the grown budget fills and evicts through the same order
    auto r = st->Fetch(sess->index, 1, {e});
    ASSERT_TRUE(r[0].ok()) << r[0].status();
    st->table().Release(sess->index, *r[0]);
  }
  s = st->Stats();
  EXPECT_EQ(s.slabs_ready, 8u);
  EXPECT_EQ(s.policy_resident, 8u);
}

TEST(ExpertStore, HeatFilePersistsAcrossRestartsForTheSameModelOnly) {
  std::string dir = MakeTempDir("store_heat");
  auto m = WriteSyntheticModel(dir, 2, 4, [](int, int) { return kRec; });
  StoreConfig c;
  c.heat_file = dir + "/heat.bin";
  {
    auto st = MakeStore(m, 4, c);
    auto sess = st->OpenSession(1);
    for (int k = 0; k < 5; ++k) {
      auto r = st->Fetch(sess->index, 1, {3});
      st->table().Release(sess->index, *r[0]);
    }
  }
  {
    auto st = MakeStore(m, 4, c);
    EXPECT_GT(st->Heat()[4 + 3].heat, 4.0);
  }
  auto m2 = WriteSyntheticModel(MakeTempDir("store_heat2"), 2, 4, [](int, int) { return kRec; }, 2, "other-model");
  auto st = MakeStore(m2, 4, c);  // warns, starts cold
  EXPECT_EQ(st->Heat()[4 + 3].heat, 0.0);
}

}  // namespace
}  // namespace moe::expertstore
