// Model::ForwardBatch (continuous batching in the engine): several sequences,
// each with its own KV cache and position, in ONE forward per step, decode
// rows mixed with prefill chunks of other sequences.
//  - Greedy tokens AND the sampled rows' logits of every sequence are bit-
//    identical to the sequence run alone, for several batch compositions
//    (staggered arrivals), prefill chunk sizes, both numerics, both model
//    types, and integer-format weights through common/kernels.
//  - Each distinct routed expert of a layer is fetched once per step: the
//    step's Gets are exactly the union of what each sequence fetches alone.
//  - Bad batches (shared cache, bad id, past the context) fail before any
//    cache is touched, naming the sequence.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "common/format/safetensors.h"
#include "common/model/engine.h"
#include "tests/model/tiny_checkpoint.h"

namespace moe {
namespace {

using testing::TinySpec;
using testing::WriteTinyCheckpoint;

const std::vector<std::vector<int32_t>> kPrompts = {
    {5, 17, 3, 88, 42, 42, 7, 61, 19, 2, 33},
    {71, 9},
    {14, 50, 23, 8, 90, 1, 64, 12, 30, 44, 45, 46, 47, 3, 3, 3, 81},
    {60},
};
constexpr int kGen = 8;

struct GenRun {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // the row each token was sampled from
};

// One sequence alone: whole prompt, then one token per forward.
GenRun Alone(const Model& m, const std::vector<int32_t>& prompt) {
  const int64_t V = m.config().vocab_size;
  KvCache cache = KvCache::ForModel(m.config(), KvDtype::kF32);
  GenRun out;
  auto r = m.Forward(prompt, cache, false);
  while (r.ok() && static_cast<int>(out.tokens.size()) < kGen) {
    out.logits.emplace_back(r->logits.begin(), r->logits.begin() + V);
    out.tokens.push_back(Argmax(r->logits.data(), V));
    std::vector<int32_t> one{out.tokens.back()};
    r = m.Forward(one, cache, false);
  }
  EXPECT_TRUE(r.ok()) << r.status();
  return out;
}

// All prompts through ForwardBatch: sequence i arrives at step arrive[i];
// prompts are fed in chunks of `chunk` tokens, interleaved with the other
// sequences' decode rows; one ForwardBatch per step.
std::vector<GenRun> Batched(const Model& m, const std::vector<int>& arrive, int64_t chunk, int* max_seqs_in_step) {
  const int64_t V = m.config().vocab_size;
  const size_t N = kPrompts.size();
  std::vector<KvCache> caches;
  for (size_t i = 0; i < N; ++i) caches.push_back(KvCache::ForModel(m.config(), KvDtype::kF32));
  std::vector<GenRun> out(N);
  std::vector<int64_t> fed(N, 0);
  *max_seqs_in_step = 0;
  for (int step = 0; step < 200; ++step) {
    std::vector<BatchSeq> batch;
    std::vector<size_t> who;
    std::vector<std::vector<int32_t>> ids(N);
    for (size_t i = 0; i < N; ++i) {
      if (step < arrive[i] || static_cast<int>(out[i].tokens.size()) == kGen) continue;
      const int64_t P = static_cast<int64_t>(kPrompts[i].size());
      bool samples = true;
      if (fed[i] < P) {
        const int64_t n = std::min(chunk, P - fed[i]);
        ids[i].assign(kPrompts[i].begin() + fed[i], kPrompts[i].begin() + fed[i] + n);
        fed[i] += n;
        samples = fed[i] == P;
      } else {
        ids[i] = {out[i].tokens.back()};
      }
      batch.push_back(BatchSeq{ids[i], &caches[i], false, samples});
      who.push_back(i);
    }
    if (batch.empty()) {
      bool all_done = true;
      for (size_t i = 0; i < N; ++i) all_done = all_done && static_cast<int>(out[i].tokens.size()) == kGen;
      if (all_done) break;
      continue;
    }
    *max_seqs_in_step = std::max(*max_seqs_in_step, static_cast<int>(batch.size()));
    auto r = m.ForwardBatch(batch);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return out;
    for (size_t k = 0; k < who.size(); ++k) {
      const ForwardResult& fr = (*r)[k];
      if (!batch[k].logits) {
        EXPECT_EQ(fr.rows, 0);
        continue;
      }
      EXPECT_EQ(fr.rows, 1);
      GenRun& o = out[who[k]];
      o.logits.emplace_back(fr.logits.begin(), fr.logits.begin() + V);
      o.tokens.push_back(Argmax(fr.logits.data(), V));
    }
  }
  return out;
}

using BatchForward = testing::TinyArchTest;

TEST_P(BatchForward, EverySequenceMatchesItselfAloneBitForBit) {
  struct Case {
    Numerics num;
    std::optional<QFormat> quant;  // dense + experts re-stored in an integer format (kernels path)
    AttentionPath attention;
  };
  constexpr AttentionPath kEx = AttentionPath::kExplicit, kAb = AttentionPath::kAbsorbed;
  for (const Case& cs : {Case{Numerics::kHfBf16, std::nullopt, kEx}, Case{Numerics::kF32, std::nullopt, kEx},
                         Case{Numerics::kHfBf16, QFormat::kQ4G32, kEx}, Case{Numerics::kHfBf16, std::nullopt, kAb},
                         Case{Numerics::kHfBf16, QFormat::kQ4G32, kAb}}) {
    EngineConfig ec;
    ec.numerics = cs.num;
    ec.attention = cs.attention;
    ec.dense_format = cs.quant;
    ec.expert_format = cs.quant;
    auto e = Engine::Open(dir_, ec);
    ASSERT_TRUE(e.ok()) << e.status();
    const Model& m = (*e)->model();
    std::vector<GenRun> ref;
    for (const auto& p : kPrompts) ref.push_back(Alone(m, p));
    struct Comp {
      std::vector<int> arrive;
      int64_t chunk;
    };
    for (const Comp& comp : {Comp{{0, 0, 0, 0}, 1}, Comp{{0, 0, 0, 0}, 4}, Comp{{0, 2, 3, 9}, 3},
                             Comp{{5, 0, 1, 1}, 64}, Comp{{0, 1, 2, 3}, 7}}) {
      int widest = 0;
      std::vector<GenRun> got = Batched(m, comp.arrive, comp.chunk, &widest);
      EXPECT_GE(widest, 2);
      for (size_t i = 0; i < kPrompts.size(); ++i) {
        const std::string what = absl::StrCat("seq ", i, " chunk ", comp.chunk, " numerics ",
                                              static_cast<int>(cs.num), " quant ", cs.quant.has_value(),
                                              cs.attention == kAb ? " absorbed" : " explicit");
        EXPECT_EQ(got[i].tokens, ref[i].tokens) << what;
        ASSERT_EQ(got[i].logits.size(), ref[i].logits.size()) << what;
        for (size_t t = 0; t < ref[i].logits.size(); ++t) {
          EXPECT_EQ(std::memcmp(got[i].logits[t].data(), ref[i].logits[t].data(),
                                ref[i].logits[t].size() * sizeof(float)),
                    0)
              << what << " token " << t;
        }
      }
    }
  }
}

// Records every Get, per step.
class RecordingSource : public ExpertSource {
 public:
  explicit RecordingSource(ExpertSource* inner) : inner_(inner) {}
  absl::StatusOr<ExpertLease> Get(int layer, int expert) override {
    std::lock_guard<std::mutex> l(mu_);
    gets.push_back({layer, expert});
    return inner_->Get(layer, expert);
  }
  ExpertSourceStats Stats() const override { return inner_->Stats(); }
  std::vector<std::pair<int, int>> gets;

 private:
  std::mutex mu_;
  ExpertSource* inner_;
};

TEST_P(BatchForward, EachDistinctExpertFetchedOncePerLayerPerStep) {
  auto e = Engine::Open(dir_, EngineConfig{});
  ASSERT_TRUE(e.ok()) << e.status();
  RecordingSource rec(&(*e)->local_source());
  auto ck = OpenCheckpoint(dir_);
  ASSERT_TRUE(ck.ok()) << ck.status();
  auto w = LoadResidentWeights(**ck, (*e)->config());
  ASSERT_TRUE(w.ok()) << w.status();
  auto m = std::make_unique<Model>((*e)->config(), std::move(*w), &rec, (*e)->model().options());
  // Bring four sequences to different positions, then compare one batched
  // step (two decode rows + two prefill chunks) with the same rows alone.
  std::vector<KvCache> caches;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    caches.push_back(KvCache::ForModel(m->config(), KvDtype::kF32));
    if (i % 2 == 0) {
      ASSERT_TRUE(m->Forward(kPrompts[i], caches[i], false).ok());
    }
  }
  const std::vector<std::vector<int32_t>> rows = {{7}, {71, 9}, {40}, {60}};
  std::set<std::pair<int, int>> union_alone;
  size_t gets_alone = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    KvCache c = caches[i];
    rec.gets.clear();
    ASSERT_TRUE(m->Forward(rows[i], c, false).ok());
    gets_alone += rec.gets.size();
    union_alone.insert(rec.gets.begin(), rec.gets.end());
  }
  std::vector<BatchSeq> batch;
  for (size_t i = 0; i < rows.size(); ++i) batch.push_back(BatchSeq{rows[i], &caches[i], false, true});
  rec.gets.clear();
  ASSERT_TRUE(m->ForwardBatch(batch).ok());
  std::set<std::pair<int, int>> batch_set(rec.gets.begin(), rec.gets.end());
  EXPECT_EQ(rec.gets.size(), batch_set.size()) << "an expert was fetched twice in one step";
  EXPECT_EQ(batch_set, union_alone);
  // 5 rows x top-2 of 8 experts over 2 MoE layers: rows share experts.
  EXPECT_LT(rec.gets.size(), gets_alone);
}

// The look-ahead of a batch hints the union of its rows' predicted experts,
// unless that union is most of the layer (then it would only compete with
// the demand reads).
TEST(LookAhead, BatchHintsTheUnionUnlessItCoversMostOfTheLayer) {
  auto keys = Model::LookAheadKeys(3, {{5, 1}, {1, 2}, {2, 5}}, 8);
  ASSERT_EQ(keys.size(), 3u);
  EXPECT_EQ(keys[0], (ExpertKey{3, 1}));
  EXPECT_EQ(keys[1], (ExpertKey{3, 2}));
  EXPECT_EQ(keys[2], (ExpertKey{3, 5}));
  EXPECT_EQ(Model::LookAheadKeys(3, {{0, 1}, {2, 3}}, 8).size(), 4u);  // exactly half: still hinted
  EXPECT_TRUE(Model::LookAheadKeys(3, {{0, 1}, {2, 3}, {4, 0}}, 8).empty());
  // GLM-5 shape: 16 decode rows x top-8 of 256 share experts well below half.
  std::vector<std::vector<int>> rows;
  for (int r = 0; r < 16; ++r) {
    rows.emplace_back();
    for (int k = 0; k < 8; ++k) rows.back().push_back((r * 5 + k * 11) % 256);
  }
  auto many = Model::LookAheadKeys(70, rows, 256);
  EXPECT_FALSE(many.empty());
  EXPECT_LE(many.size(), 128u);
}

TEST_P(BatchForward, BadBatchFailsBeforeTouchingAnyCache) {
  auto e = Engine::Open(dir_, EngineConfig{});
  ASSERT_TRUE(e.ok()) << e.status();
  const Model& m = (*e)->model();
  KvCache a = (*e)->NewCache(), b = (*e)->NewCache();
  const std::vector<int32_t> good = {1, 2, 3}, bad = {4, 97};
  {
    std::vector<BatchSeq> batch = {{good, &a}, {bad, &b}};
    auto r = m.ForwardBatch(batch);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("batch sequence 1"), absl::string_view::npos) << r.status();
    EXPECT_NE(r.status().message().find("97"), absl::string_view::npos) << r.status();
  }
  {
    std::vector<BatchSeq> batch = {{good, &a}, {good, &a}};
    auto r = m.ForwardBatch(batch);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("share one KV cache"), absl::string_view::npos) << r.status();
  }
  {
    const std::vector<int32_t> empty;
    std::vector<BatchSeq> batch = {{good, &a}, {empty, &b}};
    EXPECT_FALSE(m.ForwardBatch(batch).ok());
    EXPECT_FALSE(m.ForwardBatch({}).ok());
  }
  {
    std::vector<int32_t> longp(spec_.max_pos + 1, 3);
    std::vector<BatchSeq> batch = {{good, &a}, {longp, &b}};
    auto r = m.ForwardBatch(batch);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kOutOfRange);
  }
  EXPECT_EQ(a.length(), 0);
  EXPECT_EQ(b.length(), 0);
  EXPECT_TRUE(a.tokens().empty());
}


// ForwardPass (the layer-major prefill's engine side): a batch run one layer
// at a time, with an unrelated sequence's forwards between its layers, gives
// the same logits bit for bit and the same caches as ForwardBatch; finishing
// early is refused; truncating an abandoned pass restores the caches.
TEST_P(BatchForward, PassInLayerStepsEqualsForwardBatch) {
  auto e = Engine::Open(dir_, EngineConfig{});
  ASSERT_TRUE(e.ok()) << e.status();
  const Model& m = (*e)->model();
  KvCache dec = (*e)->NewCache();
  ASSERT_TRUE(m.Forward(kPrompts[0], dec, false).ok());
  const std::vector<int32_t> row = {7}, chunk = kPrompts[2];
  KvCache dec1 = dec, dec2 = dec, pre1 = (*e)->NewCache(), pre2 = (*e)->NewCache();
  std::vector<BatchSeq> b1 = {{row, &dec1, false, true}, {chunk, &pre1, true, true}};
  b1[1].prefill = true;
  auto whole = m.ForwardBatch(b1);
  ASSERT_TRUE(whole.ok()) << whole.status();
  std::vector<BatchSeq> b2 = {{row, &dec2, false, true}, {chunk, &pre2, true, true}};
  b2[1].prefill = true;
  auto pass = m.BeginPass(b2);
  ASSERT_TRUE(pass.ok()) << pass.status();
  EXPECT_EQ(m.FinishPass(**pass).status().code(), absl::StatusCode::kFailedPrecondition);
  auto pass2 = m.BeginPass(b2);  // the refused finish spoiled the first
  ASSERT_TRUE(pass2.ok());
  KvCache other = (*e)->NewCache();
  for (int l = 0; !(*pass2)->layers_done(); ++l) {
    ASSERT_TRUE(m.AdvancePass(**pass2, 1).ok());
    EXPECT_EQ((*pass2)->next_layer(), l + 1);
    ASSERT_TRUE(m.Forward(std::vector<int32_t>{static_cast<int32_t>(10 + l)}, other, false).ok());
  }
  auto stepped = m.FinishPass(**pass2);
  ASSERT_TRUE(stepped.ok()) << stepped.status();
  ASSERT_EQ(stepped->size(), whole->size());
  for (size_t i = 0; i < whole->size(); ++i) {
    ASSERT_EQ((*stepped)[i].logits.size(), (*whole)[i].logits.size());
    EXPECT_EQ(std::memcmp((*stepped)[i].logits.data(), (*whole)[i].logits.data(),
                          (*whole)[i].logits.size() * sizeof(float)),
              0)
        << "sequence " << i;
  }
  EXPECT_EQ(dec2.Serialize(), dec1.Serialize());
  EXPECT_EQ(pre2.Serialize(), pre1.Serialize());
  // Abandoned half-way: Truncate back to the old length is the old cache.
  KvCache dec3 = dec;
  std::vector<BatchSeq> b3 = {{chunk, &dec3, false, true}};
  auto pass3 = m.BeginPass(b3);
  ASSERT_TRUE(pass3.ok());
  ASSERT_TRUE(m.AdvancePass(**pass3, 1).ok());
  EXPECT_FALSE((*pass3)->layers_done());
  dec3.Truncate(dec.length());
  EXPECT_EQ(dec3.Serialize(), dec.Serialize());
  EXPECT_EQ(m.AdvancePass(**pass3, 0).code(), absl::StatusCode::kInvalidArgument);
}

// Records the use each expert was fetched with.
class UseRecordingSource : public ExpertSource {
 public:
  explicit UseRecordingSource(ExpertSource* inner) : inner_(inner) {}
  absl::StatusOr<ExpertLease> Get(int layer, int expert) override { return inner_->Get(layer, expert); }
  absl::Status GetEach(int layer, std::span<const int> experts, const ExpertReady& ready, FetchUse use) override {
    for (int x : experts) uses[{layer, x}].push_back(use);
    return inner_->GetEach(layer, experts, ready, use);
  }
  ExpertSourceStats Stats() const override { return inner_->Stats(); }
  std::map<std::pair<int, int>, std::vector<FetchUse>> uses;

 private:
  ExpertSource* inner_;
};

// Prompt rows' experts go as FetchUse::kPrefill unless a decode row of the
// same step uses them too; the flag never changes a logit.
TEST_P(BatchForward, PrefillOnlyExpertsAreFetchedAsPrefill) {
  auto e = Engine::Open(dir_, EngineConfig{});
  ASSERT_TRUE(e.ok()) << e.status();
  UseRecordingSource rec(&(*e)->local_source());
  auto ck = OpenCheckpoint(dir_);
  ASSERT_TRUE(ck.ok()) << ck.status();
  auto w = LoadResidentWeights(**ck, (*e)->config());
  ASSERT_TRUE(w.ok()) << w.status();
  auto m = std::make_unique<Model>((*e)->config(), std::move(*w), &rec, (*e)->model().options());
  std::map<std::pair<int, int>, std::set<int64_t>> route_rows;  // (layer, expert) -> rows (position)
  KvCache dec = KvCache::ForModel(m->config(), KvDtype::kF32);
  ASSERT_TRUE(m->Forward(kPrompts[2], dec, false).ok());  // the decode row's position (17) is past the chunk's
  const std::vector<int32_t> row = {7}, chunk = kPrompts[0];
  std::vector<std::vector<float>> logits[2];
  for (int flagged = 0; flagged < 2; ++flagged) {
    KvCache d = dec, p = KvCache::ForModel(m->config(), KvDtype::kF32);
    std::vector<BatchSeq> b = {{row, &d, false, true}, {chunk, &p, false, true}};
    b[1].prefill = flagged == 1;
    rec.uses.clear();
    // Which experts the decode row uses: its positions are the ones past the prompt.
    std::set<std::pair<int, int>> decode_experts;
    m->set_route_tap([&](int layer, int64_t pos, std::span<const int> ex) {
      if (pos == static_cast<int64_t>(kPrompts[2].size())) {
        for (int x : ex) decode_experts.insert({layer, x});
      }
    });
    auto r = m->ForwardBatch(b);
    m->set_route_tap(nullptr);
    ASSERT_TRUE(r.ok()) << r.status();
    for (const auto& fr : *r) logits[flagged].push_back(fr.logits);
    for (const auto& [key, us] : rec.uses) {
      ASSERT_EQ(us.size(), 1u) << "fetched twice in one step";
      const bool decode = decode_experts.count(key) > 0;
      const FetchUse want = flagged && !decode ? FetchUse::kPrefill : FetchUse::kDecode;
      EXPECT_EQ(us[0], want) << "layer " << key.first << " expert " << key.second;
    }
  }
  ASSERT_EQ(logits[0].size(), logits[1].size());
  for (size_t i = 0; i < logits[0].size(); ++i) EXPECT_EQ(logits[0][i], logits[1][i]);
}

// The in-process LRU under a prefill scan: a miss enters at the cold end, a
// hit is not refreshed, so the decode working set stays resident.
TEST_P(BatchForward, PrefillScanDoesNotEvictTheLocalDecodeWorkingSet) {
  auto probe = Engine::Open(dir_, EngineConfig{});
  ASSERT_TRUE(probe.ok());
  int64_t each = 0;
  {
    auto l = (*probe)->local_source().Get(1, 0);
    ASSERT_TRUE(l.ok());
    each = l->weights().Bytes();
  }
  EngineConfig ec;
  ec.expert_budget_bytes = 3 * each;  // room for the 2 decode experts + 1
  auto e = Engine::Open(dir_, ec);
  ASSERT_TRUE(e.ok()) << e.status();
  LocalExpertSource& src = (*e)->local_source();
  for (int x : {0, 1}) ASSERT_TRUE(src.Get(1, x).ok());
  const std::vector<int> scan = {2, 3, 4, 5, 6, 7, 0};
  ASSERT_TRUE(src.GetEach(1, scan, [](size_t, ExpertLease) { return absl::OkStatus(); }, FetchUse::kPrefill).ok());
  const int64_t misses = src.Stats().misses;
  for (int x : {0, 1}) ASSERT_TRUE(src.Get(1, x).ok());
  EXPECT_EQ(src.Stats().misses, misses) << "a prefill scan evicted the decode working set";
  // The same scan as decode fetches does evict them (what kPrefill prevents).
  ASSERT_TRUE(src.GetEach(1, scan, [](size_t, ExpertLease) { return absl::OkStatus(); }, FetchUse::kDecode).ok());
  const int64_t misses2 = src.Stats().misses;
  ASSERT_TRUE(src.Get(1, 1).ok());
  EXPECT_EQ(src.Stats().misses, misses2 + 1);
}

INSTANTIATE_TEST_SUITE_P(Models, BatchForward, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "glm" : "deepseek_v3"; });

}  // namespace
}  // namespace moe
