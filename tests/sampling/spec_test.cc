// Speculative decoding, token side: modes, n-gram drafts, the acceptance
// rule, statistics and the depth chooser (common/sampling/spec.h).
#include "common/sampling/spec.h"

#include <gtest/gtest.h>

#include "common/sampling/sampler.h"
#include "common/sampling/spec_ngram.h"

namespace moe {
namespace {

TEST(SpecMode, ParsesAndRefusesByName) {
  for (const char* m : {"off", "mtp", "ngram", "auto"}) {
    auto p = ParseSpecMode(m);
    ASSERT_TRUE(p.ok()) << m;
    EXPECT_EQ(SpecModeName(*p), m);
  }
  auto bad = ParseSpecMode("eagle");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("eagle"), std::string::npos);
  EXPECT_NE(CheckSpecOptions({SpecMode::kMtp, 0}).message().find("--draft-tokens"), std::string::npos);
  EXPECT_FALSE(CheckSpecOptions({SpecMode::kMtp, kMaxDraftTokens + 1}).ok());
  EXPECT_TRUE(CheckSpecOptions({SpecMode::kMtp, 4}).ok());
}

TEST(NgramDraft, LongestSuffixLatestOccurrence) {
  // ... 1 2 3 [7 8] ... 2 3 [9] ... 1 2 3 -> the 3-gram "1 2 3" matched last at 0: 7 8.
  const std::vector<int32_t> s = {1, 2, 3, 7, 8, 5, 2, 3, 9, 6, 1, 2, 3};
  EXPECT_EQ(NgramDraft(s, 2), (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(NgramDraft(s, 5), (std::vector<int32_t>{7, 8, 5, 2, 3}));
  // Only a 1-gram match: its latest earlier occurrence.
  const std::vector<int32_t> t = {4, 5, 4, 6, 9, 4};
  EXPECT_EQ(NgramDraft(t, 1), (std::vector<int32_t>{6}));
  // A draft stops at the end of the sequence.
  const std::vector<int32_t> u = {3, 3};
  EXPECT_EQ(NgramDraft(u, 4), (std::vector<int32_t>{3}));
  EXPECT_TRUE(NgramDraft(std::vector<int32_t>{1, 2, 3}, 3).empty());
  EXPECT_TRUE(NgramDraft(s, 0).empty());
  // The match length is reported (auto weighs long matches apart): 3 for s, 1 for t, 0 for none.
  int matched = -1;
  NgramDraft(s, 2, 4, &matched);
  EXPECT_EQ(matched, 3);
  NgramDraft(t, 1, 4, &matched);
  EXPECT_EQ(matched, 1);
  NgramDraft(std::vector<int32_t>{1, 2, 3}, 3, 4, &matched);
  EXPECT_EQ(matched, 0);
}

TEST(AcceptDrafts, StopsAtFirstMismatchAndAtTheEnd) {
  const std::vector<int32_t> drafts = {5, 6, 7};
  std::vector<int32_t> target = {5, 6, 9, 1};
  std::vector<int32_t> got;
  auto draw = [&](int row) {
    got.push_back(target[row]);
    return target[row];
  };
  Acceptance a = AcceptDrafts(drafts, draw);
  EXPECT_EQ(a.drawn, 3);
  EXPECT_EQ(a.accepted, 2);
  EXPECT_EQ(got, (std::vector<int32_t>{5, 6, 9}));
  // Every draft accepted: the bonus row is drawn too.
  target = {5, 6, 7, 1};
  got.clear();
  a = AcceptDrafts(drafts, draw);
  EXPECT_EQ(a.drawn, 4);
  EXPECT_EQ(a.accepted, 3);
  // The sequence ends at row 1 (its token equal to the draft): counted, nothing after it.
  got.clear();
  a = AcceptDrafts(drafts, [&](int row) { return row == 1 ? -1 : target[row]; });
  EXPECT_EQ(a.drawn, 2);
  EXPECT_EQ(a.accepted, 1);
  // No drafts: one plain draw.
  a = AcceptDrafts({}, draw);
  EXPECT_EQ(a.drawn, 1);
  EXPECT_EQ(a.accepted, 0);
}

TEST(SpecStats, CountsPerPosition) {
  SpecStats s;
  s.Record(3, 1, 2);
  s.Record(2, 2, 3);
  s.Record(0, 0, 1);
  EXPECT_EQ(s.steps, 3);
  EXPECT_EQ(s.tokens, 6);
  EXPECT_EQ(s.drafted, 5);
  EXPECT_EQ(s.accepted, 3);
  EXPECT_EQ(s.drafted_at, (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(s.accepted_at, (std::vector<int64_t>{2, 1, 0}));
  EXPECT_DOUBLE_EQ(s.TokensPerStep(), 2.0);
  SpecStats t;
  t.Add(s);
  t.Add(s);
  EXPECT_EQ(t.drafted_at, (std::vector<int64_t>{4, 4, 2}));
}

TEST(DepthChooser, DraftsWhenAcceptedAndCheapNeverWhenCostly) {
  DepthChooser cheap;
  for (int i = 0; i < 50; ++i) cheap.ObserveAcceptance(4, 4);
  cheap.ObserveStep(1, 1, 1.0);
  for (int64_t rows = 2; rows <= 5; ++rows) cheap.ObserveStep(1, rows, 1.0 + 0.05 * (rows - 1));
  EXPECT_EQ(cheap.Choose(4, 1, 0), 4);
  EXPECT_GT(cheap.Acceptance(3), 0.9);
  EXPECT_NEAR(cheap.Cost(1, 5), 1.2, 1e-9);  // plain(1) + 4 rows x 0.05
  // Acceptance of nothing: no depth pays.
  DepthChooser rejected;
  for (int i = 0; i < 50; ++i) rejected.ObserveAcceptance(2, 0);
  EXPECT_LT(rejected.Acceptance(0), 0.05);
  EXPECT_EQ(rejected.Choose(4, 1, 0), 0);
  // Accepted but a verify costs 3x a plain step (uncached experts): off.
  DepthChooser costly;
  for (int i = 0; i < 50; ++i) costly.ObserveAcceptance(4, 2);
  costly.ObserveStep(1, 1, 1.0);
  for (int64_t rows = 2; rows <= 5; ++rows) costly.ObserveStep(1, rows, 3.0 * rows);
  EXPECT_EQ(costly.Choose(4, 1, 0), 0);
  // Nothing measured: a plain step first; then depth 1 is tried (optimistic cost).
  DepthChooser fresh;
  EXPECT_EQ(fresh.Choose(2, 1, 0), 0);
  fresh.ObserveStep(1, 1, 1.0);
  EXPECT_EQ(fresh.Choose(2, 1, 0), 1);
  // A verify that costs a row each (compute-bound) at 30% acceptance: off once measured.
  for (int i = 0; i < 20; ++i) fresh.ObserveAcceptance(2, i % 3 == 0 ? 1 : 0);
  for (int64_t rows = 2; rows <= 3; ++rows) fresh.ObserveStep(1, rows, static_cast<double>(rows));
  EXPECT_EQ(fresh.Choose(2, 1, 0), 0);
  // Batched and compute-bound (each draft row costs a tenth of a 10-row step, as the demo model's
  // 8-stream steps in process): the other sequences' rows count, their tokens wait for this one's
  // drafts too. At half a row's cost per row, fully accepted drafts pay alone (base 0), not behind
  // 8 planned rows.
  DepthChooser batched;
  for (int i = 0; i < 50; ++i) batched.ObserveAcceptance(4, 4);
  batched.ObserveStep(1, 1, 1.0);
  batched.ObserveStep(1, 2, 1.5);
  batched.ObserveStep(9, 9, 5.0);
  batched.ObserveStep(9, 10, 5.5);
  batched.ObserveStep(9, 11, 6.0);  // depths 1 and 2 measured: 0.5 a row, nothing a verify
  EXPECT_EQ(batched.Choose(4, 9, 8), 0);
  EXPECT_GT(batched.Choose(4, 1, 0), 0);
  // Memory-bound (rows nearly free, GLM-5 through expertd): drafts pay in a batch too.
  DepthChooser membound;
  for (int i = 0; i < 50; ++i) membound.ObserveAcceptance(4, 4);
  membound.ObserveStep(9, 9, 1.18);
  for (int64_t k = 1; k <= 3; ++k) membound.ObserveStep(9, 9 + k, 1.18 + 0.02 * k);
  EXPECT_EQ(membound.Choose(4, 9, 8), 4);
}

TEST(DepthChooser, ADraftRowIsPricedByDraftRowsNotByMoreSequences) {
  // Through the stack a sequence costs its serving work (sampling, delivery, gRPC): plain steps of 1
  // and 8 sequences differ by ~1 ms a sequence, a draft row costs ~0.1 ms. The old model took the
  // slope between plain sizes as a draft row's price and never drafted at 8 streams.
  DepthChooser c;
  for (int i = 0; i < 50; ++i) c.ObserveAcceptance(2, 1);  // about one in two accepted
  c.ObserveStep(1, 1, 3.5);
  c.ObserveStep(8, 8, 11.0);
  EXPECT_FALSE(c.RowMeasured(8));
  EXPECT_EQ(c.Choose(2, 8, 7), 1);  // the prior (10% of a plain row) lets depth 1 be tried
  c.ObserveStep(8, 9, 11.1);        // measured: 0.1 ms a draft row
  EXPECT_TRUE(c.RowMeasured(8));
  EXPECT_NEAR(c.Cost(8, 10), 11.2, 1e-9);
  EXPECT_GE(c.Choose(2, 8, 7), 1);
  // A neighbouring batch size without a measurement of its own uses the nearest one's row cost.
  c.ObserveStep(7, 7, 10.0);
  EXPECT_NEAR(c.Cost(7, 9), 10.2, 1e-9);
  // Not observable: rows below the plain size, or a plain size never measured.
  EXPECT_LT(c.Cost(8, 7), 0);
  EXPECT_LT(c.Cost(3, 4), 0);
  EXPECT_EQ(c.Choose(2, 3, 2), 0);
}

TEST(DepthChooser, ExploresOneDepthAtATimeShallowestFirst) {
  DepthChooser c;
  for (int i = 0; i < 50; ++i) c.ObserveAcceptance(4, 4);  // every draft accepted
  c.ObserveStep(1, 1, 1.0);
  EXPECT_EQ(c.Choose(4, 1, 0), 1);  // a trial costs one extra row, not four
  c.ObserveStep(1, 2, 1.05);
  EXPECT_EQ(c.Choose(4, 1, 0), 2);  // one deeper than measured
  c.ObserveStep(1, 3, 1.10);
  EXPECT_EQ(c.Choose(4, 1, 0), 3);
  // Several sequences drafting in one step: a verify's own cost (v) told from a row's (r).
  DepthChooser fit;
  fit.ObserveStep(8, 8, 10.0);
  fit.ObserveStep(8, 10, 11.0, 2);  // two sequences, a draft each: 2 v + 2 r = 1.0
  fit.ObserveStep(8, 12, 11.0, 1);  // one sequence, four drafts:      v + 4 r = 1.0
  EXPECT_NEAR(fit.Cost(8, 9, 1), 10.5, 1e-6);   // v = 1/3, r = 1/6
  EXPECT_NEAR(fit.Cost(8, 11, 1), 10.833333, 1e-5);
  EXPECT_NEAR(fit.Cost(8, 8, 0), 10.0, 1e-9);
  // A first row that costs a whole step: v and r cannot be told apart yet, so the next depth is
  // tried once (r assumed at most the prior); measured, a row each, the descent stops.
  DepthChooser costly;
  for (int i = 0; i < 50; ++i) costly.ObserveAcceptance(4, 4);
  costly.ObserveStep(1, 1, 1.0);
  costly.ObserveStep(1, 2, 2.0);
  EXPECT_EQ(costly.Choose(4, 1, 0), 2);
  costly.ObserveStep(1, 3, 3.0);
  EXPECT_EQ(costly.Choose(4, 1, 0), 0);
}

TEST(DepthChooser, AStaleStepCostIsTriedAgain) {
  DepthChooser c;
  for (int i = 0; i < 50; ++i) c.ObserveAcceptance(4, 4);
  c.ObserveStep(1, 1, 1.0);
  c.ObserveStep(1, 2, 3.0);  // one noisy trial: a verify row looked like two steps
  EXPECT_EQ(c.Choose(4, 1, 0), 0);
  EXPECT_TRUE(c.RowMeasured(1));
  // Plain steps only, for longer than kStaleSteps: the old figure no longer decides.
  for (int64_t i = 0; i <= DepthChooser::kStaleSteps; ++i) c.ObserveStep(1, 1, 1.0);
  EXPECT_FALSE(c.RowMeasured(1));
  EXPECT_EQ(c.Choose(4, 1, 0), 1);  // tried again (one row)
  c.ObserveStep(1, 2, 1.05);         // and measured afresh, not averaged with the stale 3.0
  EXPECT_EQ(c.Choose(4, 1, 0), 2);
}

TEST(KeyedRng, DependsOnSeedAndIndexOnly) {
  Rng a = KeyedRng(7, 3), b = KeyedRng(7, 3), c = KeyedRng(7, 4), d = KeyedRng(8, 3);
  const uint64_t x = a();
  EXPECT_EQ(x, b());
  EXPECT_NE(x, c());
  EXPECT_NE(x, d());
}

TEST(ProposeDrafts, ModesPickTheirSource) {
  const std::vector<int32_t> h = {1, 2, 3, 1, 2};
  int mtp_calls = 0;
  MtpDraftFn mtp = [&](int k) -> absl::StatusOr<std::vector<int32_t>> {
    ++mtp_calls;
    return std::vector<int32_t>(k, 42);
  };
  AutoChoosers ch;
  DepthChooser costs;
  DraftSource used;
  auto propose = [&](SpecMode m, int room, const std::vector<int32_t>& hist, const MtpDraftFn& fn) {
    return *ProposeDrafts(m, room, hist, fn, ch, costs, 1, 0, &used);
  };
  EXPECT_EQ(propose(SpecMode::kNgram, 2, h, mtp), (std::vector<int32_t>{3, 1}));
  EXPECT_EQ(used, DraftSource::kNgram);
  EXPECT_EQ(propose(SpecMode::kMtp, 2, h, mtp), (std::vector<int32_t>{42, 42}));
  EXPECT_EQ(used, DraftSource::kMtp);
  EXPECT_TRUE(propose(SpecMode::kOff, 2, h, mtp).empty());
  EXPECT_EQ(used, DraftSource::kNone);
  EXPECT_TRUE(propose(SpecMode::kMtp, 0, h, mtp).empty());
  EXPECT_TRUE(propose(SpecMode::kMtp, 2, h, nullptr).empty());
  EXPECT_EQ(mtp_calls, 1);
  // auto: a source whose drafts were never accepted is dropped for the one that pays; none if neither.
  for (int64_t rows = 1; rows <= 3; ++rows) costs.ObserveStep(1, rows, 1.0 + 0.05 * (rows - 1));
  for (int i = 0; i < 40; ++i) {
    ch.ngram[AutoChoosers::Bucket(2)].ObserveAcceptance(2, 0);  // h's lookup matches 2 tokens
    ch.mtp.ObserveAcceptance(2, 2);
  }
  EXPECT_EQ(propose(SpecMode::kAuto, 2, h, mtp), (std::vector<int32_t>{42, 42}));
  EXPECT_EQ(used, DraftSource::kMtp);
  for (int i = 0; i < 2000; ++i) ch.mtp.ObserveAcceptance(2, 0);  // 2% accepted
  EXPECT_TRUE(propose(SpecMode::kAuto, 2, h, mtp).empty());
  EXPECT_EQ(used, DraftSource::kNone);
  // A lookup that is accepted is preferred to an MTP layer that costs its own time.
  AutoChoosers good;
  for (int i = 0; i < 40; ++i) {
    good.ngram[AutoChoosers::Bucket(2)].ObserveAcceptance(2, 2);
    good.mtp.ObserveAcceptance(2, 2);
  }
  good.mtp.ObserveDraft(2, 1.0);  // a second per draft: never pays
  EXPECT_EQ(*ProposeDrafts(SpecMode::kAuto, 2, h, mtp, good, costs, 1, 0, &used), (std::vector<int32_t>{3, 1}));
  EXPECT_EQ(used, DraftSource::kNgram);
}

TEST(AutoChoosers, ASequenceStartsFromItsWorkersPooledAcceptancePerMatchLength) {
  // A step of 8 sequences where a draft row costs 0.65 ms against 11.7 ms a plain step (the demo
  // model's stack): a lookup draft pays only above ~0.62 acceptance, so a new sequence at the 1/2
  // prior never drafts, and would never learn its acceptance. With the worker's pool as its prior it
  // drafts where other sequences' lookups of that match length were accepted.
  DepthChooser costs;
  costs.ObserveStep(8, 8, 11.7);
  costs.ObserveStep(8, 9, 12.35);
  AutoChoosers pool, fresh, pooled;
  pooled.Pool(&pool);
  const std::vector<int32_t> h = {5, 1, 2, 3, 9, 1, 2, 3};  // the suffix 1 2 3 matched: bucket 3
  DraftSource used;
  auto propose = [&](AutoChoosers& c) { return *ProposeDrafts(SpecMode::kAuto, 1, h, nullptr, c, costs, 8, 7, &used); };
  EXPECT_TRUE(propose(fresh).empty());
  EXPECT_TRUE(propose(pooled).empty());
  // Other sequences' three-token matches were accepted 9 times in 10; one-token ones never.
  AutoChoosers other;
  other.Pool(&pool);
  for (int i = 0; i < 40; ++i) {
    other.match = 3;
    other.Credit(DraftSource::kNgram, 1, i % 10 == 0 ? 0 : 1);
    other.match = 1;
    other.Credit(DraftSource::kNgram, 1, 0);
  }
  EXPECT_GT(pool.ngram[AutoChoosers::Bucket(3)].Acceptance(0), 0.85);
  EXPECT_LT(pool.ngram[AutoChoosers::Bucket(1)].Acceptance(0), 0.1);
  EXPECT_EQ(propose(pooled), (std::vector<int32_t>{9}));
  EXPECT_EQ(used, DraftSource::kNgram);
  EXPECT_EQ(pooled.match, 3);
  EXPECT_TRUE(propose(fresh).empty());  // no pool: the 1/2 prior
  // The sequence's own verdicts move it off the pool's: rejected five times, it stops.
  for (int i = 0; i < 5; ++i) pooled.Credit(DraftSource::kNgram, 1, 0);
  EXPECT_TRUE(propose(pooled).empty());
  // A one-token match is weighed by the one-token chooser (never accepted): no draft.
  const std::vector<int32_t> one = {7, 4, 8, 4};
  AutoChoosers pooled2;
  pooled2.Pool(&pool);
  EXPECT_TRUE(ProposeDrafts(SpecMode::kAuto, 1, one, nullptr, pooled2, costs, 8, 7, &used)->empty());
}

TEST(DraftGuard, BlocksADrafterWhoseStepsDeliverLessAndProbesAgain) {
  constexpr DraftSource kPlain = DraftSource::kNone, kMtp = DraftSource::kMtp, kNgram = DraftSource::kNgram;
  DraftGuard g;
  // No plain step at n measured yet: drafting waits for the reference.
  EXPECT_FALSE(g.Allow(1, kMtp));
  g.Observe(1, kPlain, 1, 1.0);
  EXPECT_TRUE(g.Allow(1, kMtp));
  EXPECT_FALSE(g.Allow(8, kMtp));  // each number of sequences has its own reference
  // MTP steps at 1.2 s per token against plain steps at 1.0: blocked after kMinSamples.
  for (int i = 0; i < DraftGuard::kMinSamples - 1; ++i) {
    g.Observe(1, kMtp, 2, 2.4);
    EXPECT_TRUE(g.Allow(1, kMtp));
  }
  g.Observe(1, kMtp, 2, 2.4);
  EXPECT_FALSE(g.Allow(1, kMtp));
  EXPECT_TRUE(g.Allow(1, kNgram));  // judged on its own
  EXPECT_EQ(g.blocks(), 1);
  // Plain steps during the back-off keep the reference fresh; then one probe round.
  for (int64_t i = 0; i < DraftGuard::kFirstBackoff; ++i) g.Observe(1, kPlain, 1, 1.0);
  EXPECT_TRUE(g.Allow(1, kMtp));
  for (int i = 0; i < DraftGuard::kMinSamples; ++i) g.Observe(1, kMtp, 2, 2.4);
  EXPECT_FALSE(g.Allow(1, kMtp));
  EXPECT_EQ(g.blocks(), 2);
  // The back-off doubled: still blocked after the first one's length.
  for (int64_t i = 0; i < DraftGuard::kFirstBackoff; ++i) g.Observe(1, kPlain, 1, 1.0);
  EXPECT_FALSE(g.Allow(1, kMtp));
  for (int64_t i = 0; i < DraftGuard::kFirstBackoff; ++i) g.Observe(1, kPlain, 1, 1.0);
  EXPECT_TRUE(g.Allow(1, kMtp));
}

TEST(DraftGuard, KeepsDraftsThatPayAndRefreshesAStaleReference) {
  constexpr DraftSource kPlain = DraftSource::kNone, kNgram = DraftSource::kNgram;
  DraftGuard g;
  g.Observe(4, kPlain, 4, 1.0);  // 0.25 s per token plain
  // Lookup steps at 4 sequences deliver 7 tokens in 1.1 s: they pay, never blocked.
  for (int i = 0; i < 60; ++i) {
    ASSERT_TRUE(g.Allow(4, kNgram)) << i;
    g.Observe(4, kNgram, 7, 1.1);
  }
  EXPECT_EQ(g.blocks(), 0);
  // One slow step (a catch-up, a page fault) among paying ones is outweighed: a ratio of sums.
  for (int i = 0; i < DraftGuard::kMinSamples - 1; ++i) g.Observe(4, kNgram, 7, 1.1);
  g.Observe(4, kNgram, 7, 2.0);
  EXPECT_EQ(g.blocks(), 0);
  // kFreshSteps without a plain step at 4: one plain step is asked for, then drafting resumes.
  for (int i = 0; i < 10; ++i) g.Observe(4, kNgram, 7, 1.1);
  EXPECT_FALSE(g.Allow(4, kNgram));
  g.Observe(4, kPlain, 4, 1.0);
  EXPECT_TRUE(g.Allow(4, kNgram));
}

}  // namespace
}  // namespace moe
