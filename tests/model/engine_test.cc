// Engine properties on small random models written by the test itself:
// batch invariance, cache-budget invariance, absorbed vs explicit attention,
// one fetch per distinct expert per layer, KV persistence and resume, bad
// inputs, MTP drafts.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "common/base/status.h"
#include "common/format/convert.h"
#include "common/model/engine.h"
#include "common/model/memory_fit.h"
#include "tests/model/tiny_checkpoint.h"

namespace moe {
namespace {

using testing::TinySpec;
using testing::WriteTinyCheckpoint;

std::unique_ptr<Engine> OpenOrDie(const std::string& dir, EngineConfig ec = {}) {
  auto e = Engine::Open(dir, ec);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

const std::vector<int32_t> kIds = {5, 17, 3, 88, 42, 42, 7, 61, 19, 2, 33, 71, 9, 14, 50, 23, 8, 90, 1, 64};

// Bytes of routed expert (layer, e) as the engine's store holds it.
int64_t LoadExpertFromSource(Engine& e, int layer, int expert) {
  auto lease = e.local_source().Get(layer, expert);
  EXPECT_TRUE(lease.ok()) << lease.status();
  return lease.ok() ? lease->weights().Bytes() : -1;
}

using EngineTest = testing::TinyArchTest;

// Scoring all rows at once equals feeding one token at a time, bit for bit.
TEST_P(EngineTest, BatchedEqualsSingleStep) {
  for (Numerics num : {Numerics::kHfBf16, Numerics::kF32}) {
    EngineConfig ec;
    ec.numerics = num;
    auto eng = OpenOrDie(dir_, ec);
    ASSERT_TRUE(eng);
    const int64_t V = eng->config().vocab_size;
    KvCache a = eng->NewCache();
    auto all = eng->model().Forward(kIds, a, true);
    ASSERT_TRUE(all.ok()) << all.status();
    KvCache b = eng->NewCache();
    for (size_t i = 0; i < kIds.size(); ++i) {
      auto one = eng->model().Forward(std::span(kIds).subspan(i, 1), b, false);
      ASSERT_TRUE(one.ok());
      ASSERT_EQ(0, std::memcmp(one->logits.data(), all->logits.data() + i * V, V * sizeof(float)))
          << "row " << i << (num == Numerics::kF32 ? " f32" : " bf16");
    }
    // Chunked prefill (7 + 13) equals too.
    KvCache c = eng->NewCache();
    ASSERT_TRUE(eng->model().Forward(std::span(kIds).first(7), c, false).ok());
    auto rest = eng->model().Forward(std::span(kIds).subspan(7), c, true);
    ASSERT_TRUE(rest.ok());
    EXPECT_EQ(0, std::memcmp(rest->logits.data(), all->logits.data() + 7 * V, (kIds.size() - 7) * V * sizeof(float)));
  }
}

// The profile partitions a forward: every component >= 0, their sum within
// the total, prefill and decode split by Generate; the tokens are the same
// with and without it.
TEST_P(EngineTest, ProfileSplitsForwardTimeByComponent) {
  auto eng = OpenOrDie(dir_, EngineConfig{.expert_budget_bytes = 0});
  ASSERT_TRUE(eng);
  // A prompt whose greedy continuation does not stop at EOS at once.
  size_t n = 0;
  absl::StatusOr<GenerateResult> ref;
  for (n = 2; n <= kIds.size(); ++n) {
    KvCache plain = eng->NewCache();
    ref = eng->Generate(std::span(kIds).first(n), 5, SamplingParams{}, plain);
    ASSERT_TRUE(ref.ok()) << ref.status();
    if (ref->tokens.size() == 5) break;
  }
  ASSERT_EQ(ref->tokens.size(), 5u);
  EXPECT_FALSE(ref->profiled);
  StepProfile p;
  eng->mutable_model().set_profile(&p);
  KvCache cache = eng->NewCache();
  auto r = eng->Generate(std::span(kIds).first(n), 5, SamplingParams{}, cache);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tokens, ref->tokens);
  ASSERT_TRUE(r->profiled);
  EXPECT_EQ(r->prefill_profile.forwards, 1);
  EXPECT_EQ(r->prefill_profile.rows, static_cast<int64_t>(n));
  EXPECT_EQ(r->decode_profile.forwards, 4);
  for (const StepProfile* q : {&r->prefill_profile, &r->decode_profile}) {
    for (double v : {q->embed, q->attention, q->indexer, q->router, q->shared_expert, q->dense_mlp,
                     q->routed_experts, q->expert_fetch, q->lm_head})
      EXPECT_GE(v, 0);
    EXPECT_GT(q->attention, 0);
    EXPECT_GT(q->routed_experts, 0);
    EXPECT_GT(q->lm_head, 0);
    EXPECT_GT(q->total, 0);
    EXPECT_GE(q->Other(), -1e-6 * q->total);
  }
  // A zero budget loads every expert of every step: the fetch is the store's load time.
  EXPECT_GT(r->decode_profile.expert_fetch, 0);
  EXPECT_GT(eng->expert_source().Stats().fetch_wait_seconds, r->source_after_prefill.fetch_wait_seconds);
  eng->mutable_model().set_profile(nullptr);
}

// Results do not depend on the expert cache budget; a zero budget evicts on every layer.
TEST_P(EngineTest, CacheBudgetDoesNotChangeResults) {
  std::vector<float> ref;
  for (int64_t budget : {int64_t{1} << 40, int64_t{3000}, int64_t{0}}) {
    EngineConfig ec;
    ec.expert_budget_bytes = budget;
    auto eng = OpenOrDie(dir_, ec);
    ASSERT_TRUE(eng);
    KvCache cache = eng->NewCache();
    SamplingParams sp;
    auto r = eng->Generate(kIds, 12, sp, cache);
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<float> toks(r->tokens.begin(), r->tokens.end());
    if (ref.empty()) {
      ref = toks;
    } else {
      EXPECT_EQ(toks, ref) << "budget " << budget;
    }
    const auto st = eng->local_source().Stats();
    EXPECT_LE(st.resident_bytes, budget);
    if (budget == 0) {
      EXPECT_EQ(st.hits, 0);
      EXPECT_EQ(st.evictions, st.misses);
    }
    if (budget > (1 << 30)) {
      EXPECT_EQ(st.evictions, 0);
    }
  }
}

// A source that counts Gets per (layer, expert) and per layer-call.
class CountingSource : public ExpertSource {
 public:
  explicit CountingSource(ExpertSource* inner) : inner_(inner) {}
  absl::StatusOr<ExpertLease> Get(int layer, int expert) override {
    ++gets_[{layer, expert}];
    return inner_->Get(layer, expert);
  }
  void Hint(std::span<const ExpertKey> keys) override { hinted_ += keys.size(); }
  ExpertSourceStats Stats() const override { return inner_->Stats(); }
  std::map<std::pair<int, int>, int> gets_;
  size_t hinted_ = 0;

 private:
  ExpertSource* inner_;
};

// Delivers a layer's experts in another order than asked for (all Gets
// first, then reversed or shuffled), as a streaming source does when the
// reads land out of order.
class ReorderingSource : public ExpertSource {
 public:
  ReorderingSource(ExpertSource* inner, uint64_t seed) : inner_(inner), rng_(seed) {}
  absl::StatusOr<ExpertLease> Get(int layer, int expert) override { return inner_->Get(layer, expert); }
  absl::Status GetEach(int layer, std::span<const int> experts, const ExpertReady& ready, FetchUse) override {
    std::vector<std::pair<size_t, ExpertLease>> got;
    for (size_t i = 0; i < experts.size(); ++i) {
      auto l = inner_->Get(layer, experts[i]);
      if (!l.ok()) return l.status();
      got.push_back({i, std::move(*l)});
    }
    if (rng_() % 2) {
      std::reverse(got.begin(), got.end());
    } else {
      std::shuffle(got.begin(), got.end(), rng_);
    }
    calls_++;
    for (auto& [i, l] : got) MOE_RETURN_IF_ERROR(ready(i, std::move(l)));
    return absl::OkStatus();
  }
  ExpertSourceStats Stats() const override { return inner_->Stats(); }
  int calls_ = 0;

 private:
  ExpertSource* inner_;
  std::mt19937_64 rng_;
};

// The combine order is fixed by expert slot: whatever order the leases
// arrive in (pipelined fetches hand them over as reads land), prefill and
// decode logits are bit-identical, and so are greedy tokens.
TEST_P(EngineTest, ExpertArrivalOrderDoesNotChangeResults) {
  for (Numerics num : {Numerics::kHfBf16, Numerics::kF32}) {
    EngineConfig ec;
    ec.numerics = num;
    auto eng = OpenOrDie(dir_, ec);
    ASSERT_TRUE(eng);
    const ModelConfig cfg = eng->config();
    const int64_t V = cfg.vocab_size;
    auto ck = OpenCheckpoint(dir_);
    ASSERT_TRUE(ck.ok());
    KvCache a = eng->NewCache();
    auto ref = eng->model().Forward(kIds, a, true);
    ASSERT_TRUE(ref.ok()) << ref.status();
    for (uint64_t seed : {1, 2, 3}) {
      auto w = LoadResidentWeights(**ck, cfg);
      ASSERT_TRUE(w.ok());
      ReorderingSource reorder(&eng->local_source(), seed);
      Model m(cfg, std::move(*w), &reorder, eng->model().options());
      KvCache b = KvCache::ForModel(cfg, a.dtype());
      auto got = m.Forward(kIds, b, true);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_GT(reorder.calls_, 0);
      ASSERT_EQ(0, std::memcmp(got->logits.data(), ref->logits.data(), kIds.size() * V * sizeof(float)))
          << "seed " << seed;
      // Decode steps on top (one row per step), same as the plain source.
      KvCache a2 = a, b2 = b;
      for (int32_t tok : {11, 29, 4}) {
        const int32_t one[1] = {tok};
        auto x = eng->model().Forward(one, a2, false), y = m.Forward(one, b2, false);
        ASSERT_TRUE(x.ok() && y.ok());
        ASSERT_EQ(0, std::memcmp(x->logits.data(), y->logits.data(), V * sizeof(float))) << "decode, seed " << seed;
      }
    }
  }
}

TEST_P(EngineTest, EachDistinctExpertFetchedOncePerLayerPerBatch) {
  auto eng = OpenOrDie(dir_);
  ASSERT_TRUE(eng);
  CountingSource counting(&eng->local_source());
  auto cfg = eng->config();
  auto ck = OpenCheckpoint(dir_);
  ASSERT_TRUE(ck.ok());
  auto w = LoadResidentWeights(**ck, cfg);
  ASSERT_TRUE(w.ok());
  Model m(cfg, std::move(*w), &counting, ModelOptions{});
  KvCache cache = KvCache::ForModel(cfg, KvDtype::kF32);
  ASSERT_TRUE(m.Forward(kIds, cache, false).ok());
  ASSERT_FALSE(counting.gets_.empty());
  for (const auto& [key, n] : counting.gets_) EXPECT_EQ(n, 1) << "layer " << key.first << " expert " << key.second;
  EXPECT_EQ(counting.hinted_, counting.gets_.size());
  // 20 rows x top-2 over 8 experts: several rows share experts, so far fewer than 40 fetches per layer.
  EXPECT_LE(counting.gets_.size(), 8u * 2);
}

// The default (auto) keeps HF's explicit form for unquantized weights, where
// HF-exact tokens are the contract, and takes the absorbed form once kv_b is
// integer-quantized; an explicit request is always honoured.
TEST_P(EngineTest, AutoAttentionIsExplicitUnquantizedAndAbsorbedQuantized) {
  auto plain = OpenOrDie(dir_);
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->model().options().attention, AttentionPath::kExplicit);
  EngineConfig q8;
  q8.dense_format = QFormat::kQ8Row;
  auto quant = OpenOrDie(dir_, q8);
  ASSERT_TRUE(quant);
  EXPECT_EQ(quant->model().options().attention, AttentionPath::kAbsorbed);
  q8.attention = AttentionPath::kExplicit;
  auto forced = OpenOrDie(dir_, q8);
  ASSERT_TRUE(forced);
  EXPECT_EQ(forced->model().options().attention, AttentionPath::kExplicit);
  EXPECT_EQ(AttentionPathName(AttentionPath::kAuto), "auto");
}

TEST_P(EngineTest, AbsorbedMatchesExplicit) {
  for (Numerics num : {Numerics::kF32, Numerics::kHfBf16}) {
    EngineConfig ex, ab;
    ex.attention = AttentionPath::kExplicit;
    ex.numerics = ab.numerics = num;
    ab.attention = AttentionPath::kAbsorbed;
    auto e1 = OpenOrDie(dir_, ex), e2 = OpenOrDie(dir_, ab);
    ASSERT_TRUE(e1 && e2);
    KvCache c1 = e1->NewCache(), c2 = e2->NewCache();
    auto r1 = e1->model().Forward(kIds, c1, true), r2 = e2->model().Forward(kIds, c2, true);
    ASSERT_TRUE(r1.ok() && r2.ok());
    const int64_t V = e1->config().vocab_size;
    double maxd = 0;
    int same = 0;
    for (size_t i = 0; i < kIds.size(); ++i) {
      same += Argmax(r1->logits.data() + i * V, V) == Argmax(r2->logits.data() + i * V, V);
      for (int64_t v = 0; v < V; ++v) {
        maxd = std::max(maxd, static_cast<double>(std::abs(r1->logits[i * V + v] - r2->logits[i * V + v])));
      }
    }
    if (num == Numerics::kF32) {
      EXPECT_LT(maxd, 2e-3);  // same math, different association
      EXPECT_EQ(same, static_cast<int>(kIds.size()));
    } else {
      EXPECT_GE(same * 10, static_cast<int>(kIds.size()) * 9);  // bf16 rounding points differ
    }
  }
}

// A saved conversation resumes in a fresh engine and continues exactly.
TEST_P(EngineTest, KvPersistenceResumesExactly) {
  for (KvDtype kd : {KvDtype::kF32, KvDtype::kBF16}) {
    EngineConfig ec;
    ec.kv_dtype = kd;
    std::vector<int32_t> full;
    {
      auto eng = OpenOrDie(dir_, ec);
      ASSERT_TRUE(eng);
      KvCache cache = eng->NewCache();
      auto r = eng->Generate(kIds, 16, SamplingParams{}, cache);
      ASSERT_TRUE(r.ok());
      full = r->tokens;
    }
    const std::string path = dir_ + "/conv.kv";
    {
      auto eng = OpenOrDie(dir_, ec);
      KvCache cache = eng->NewCache();
      auto r = eng->Generate(kIds, 8, SamplingParams{}, cache);
      ASSERT_TRUE(r.ok());
      ASSERT_EQ(cache.pending_token(), r->tokens.back());
      ASSERT_TRUE(cache.Save(path).ok());
    }
    auto eng = OpenOrDie(dir_, ec);  // "new process": nothing shared but the file
    auto loaded = KvCache::Load(path);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->length(), static_cast<int64_t>(kIds.size()) + 7);
    EXPECT_EQ(loaded->tokens().size(), kIds.size() + 7);
    const int32_t pending[1] = {loaded->pending_token()};
    auto r = eng->Generate(pending, 8, SamplingParams{}, *loaded);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(std::vector<int32_t>(full.begin() + 8, full.end()), r->tokens);

    // Corruption is detected.
    std::string bytes;
    {
      std::ifstream in(path, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    bytes[bytes.size() / 2] ^= 0x40;
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
    auto bad = KvCache::Load(path);
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << "not a cache";
    EXPECT_EQ(KvCache::Load(path).status().code(), absl::StatusCode::kDataLoss);
  }
}

TEST_P(EngineTest, BadInputs) {
  auto eng = OpenOrDie(dir_);
  ASSERT_TRUE(eng);
  KvCache cache = eng->NewCache();
  const std::vector<int32_t> oov = {1, 2, 97};
  auto r = eng->model().Forward(oov, cache, false);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(r.status().message()).find("token id 97"), std::string::npos) << r.status();
  const std::vector<int32_t> neg = {-1};
  EXPECT_EQ(eng->model().Forward(neg, cache, false).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<int32_t> longp(257, 3);
  auto g = eng->Generate(longp, 1, SamplingParams{}, cache);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(std::string(g.status().message()).find("context length 256"), std::string::npos) << g.status();
  std::vector<int32_t> fits(250, 3);
  EXPECT_EQ(eng->Generate(fits, 10, SamplingParams{}, cache).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(eng->model().Forward(std::span<const int32_t>(), cache, false).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(EngineTest, MissingOrMisshapenTensorIsNamed) {
  const std::string attn = "model.layers.1.self_attn.kv_b_proj.weight";
  const std::string expert = "model.layers.2.mlp.experts.5.down_proj.weight";
  for (const std::string& t : {attn, expert, std::string("lm_head.weight")}) {
    TinySpec s = spec_;
    s.omit_tensor = t;
    const std::string d = dir_ + "_omit";
    WriteTinyCheckpoint(d, s);
    auto e = Engine::Open(d, EngineConfig{});
    ASSERT_FALSE(e.ok()) << t;
    EXPECT_EQ(e.status().code(), absl::StatusCode::kNotFound);
    EXPECT_NE(std::string(e.status().message()).find("'" + t + "' is missing"), std::string::npos) << e.status();
    if (t != expert) {  // the plan walks the resident loader: same error, before loading
      auto plan = Engine::Plan(d, EngineConfig{});
      ASSERT_FALSE(plan.ok()) << t;
      EXPECT_NE(std::string(plan.status().message()).find("'" + t + "' is missing"), std::string::npos);
    }
    s.omit_tensor.clear();
    s.reshape_tensor = t;
    WriteTinyCheckpoint(d, s);
    e = Engine::Open(d, EngineConfig{});
    ASSERT_FALSE(e.ok()) << t;
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(e.status().message()).find("'" + t + "' has shape"), std::string::npos) << e.status();
  }
}

// `moe run --model DIR` on a converted container: with a lossless policy
// (every matrix kept bf16, as stored; 1-D tensors and the router widened to
// f32, which the engine does anyway) the container path gives bit-identical
// logits and the same greedy tokens as the HF checkpoint; with the default
// q8/q4 policy the quantized matrices go through the kernels and still run.
TEST_P(EngineTest, ContainerMatchesCheckpoint) {
  ConvertOptions o;
  o.in_dir = dir_;
  o.out_dir = dir_ + "_container";
  std::filesystem::remove_all(o.out_dir);
  for (QFormat* f : {&o.policy.experts, &o.policy.attention, &o.policy.dense_mlp, &o.policy.shared_experts,
                     &o.policy.indexer, &o.policy.embedding, &o.policy.lm_head, &o.policy.mtp}) {
    *f = QFormat::kBF16;
  }
  auto conv = ConvertCheckpoint(o);
  ASSERT_TRUE(conv.ok()) << conv.status();
  ASSERT_TRUE(conv->complete);
  auto hf = OpenOrDie(dir_), ct = OpenOrDie(o.out_dir);
  ASSERT_TRUE(hf && ct);
  KvCache c1 = hf->NewCache(), c2 = ct->NewCache();
  auto r1 = hf->model().Forward(kIds, c1, true), r2 = ct->model().Forward(kIds, c2, true);
  ASSERT_TRUE(r1.ok()) << r1.status();
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_EQ(r1->logits, r2->logits);
  KvCache g1 = hf->NewCache(), g2 = ct->NewCache();
  auto t1 = hf->Generate(kIds, 12, SamplingParams{}, g1), t2 = ct->Generate(kIds, 12, SamplingParams{}, g2);
  ASSERT_TRUE(t1.ok()) << t1.status();
  ASSERT_TRUE(t2.ok()) << t2.status();
  EXPECT_EQ(t1->tokens, t2->tokens);

  // Default policy: q4_g64 experts, q8_g128 dense, q8_row embeddings.
  ConvertOptions q;
  q.in_dir = dir_;
  q.out_dir = dir_ + "_container_q";
  std::filesystem::remove_all(q.out_dir);
  auto convq = ConvertCheckpoint(q);
  ASSERT_TRUE(convq.ok()) << convq.status();
  auto cq = OpenOrDie(q.out_dir);
  ASSERT_TRUE(cq);
  EXPECT_EQ(cq->model().weights().layers[0].q_a.m.format, QFormat::kQ8G128);
  // Used as stored: resident matrices point into the shared mapping of the shard.
  EXPECT_NE(cq->model().weights().layers[0].q_a.mapping, nullptr);
  EXPECT_TRUE(cq->model().weights().layers[0].q_a.data.empty());
  EXPECT_NE(cq->model().weights().embed.mapping, nullptr);
  KvCache g3 = cq->NewCache();
  auto t3 = cq->Generate(kIds, 12, SamplingParams{}, g3);
  ASSERT_TRUE(t3.ok()) << t3.status();
  EXPECT_FALSE(t3->tokens.empty());
  for (int32_t t : t3->tokens) EXPECT_LT(t, hf->config().vocab_size);
}

// The memory plan counts what loading allocates, in the stored formats: for
// the HF checkpoint (bf16), an int4/int8 container, and re-stored formats.
TEST_P(EngineTest, MemoryPlanMatchesLoadedBytes) {
  auto check = [&](const std::string& dir, EngineConfig ec) -> MemoryPlan {
    auto plan = Engine::Plan(dir, ec);
    EXPECT_TRUE(plan.ok()) << plan.status();
    auto e = OpenOrDie(dir, ec);
    if (!plan.ok() || !e) return {};
    EXPECT_EQ(plan->resident_bytes, e->model().weights().Bytes()) << dir;
    const ModelConfig& c = e->config();
    int64_t total = 0, largest = 0;
    for (int l = 0; l <= c.num_hidden_layers; ++l) {
      if (l == c.num_hidden_layers ? e->model().weights().mtp == nullptr : !c.layer_is_moe[l]) continue;
      auto x = LoadExpertFromSource(*e, l, 1);
      total += x * c.n_routed_experts;
      largest = std::max(largest, x);
    }
    EXPECT_EQ(plan->expert_total_bytes, total) << dir;
    EXPECT_EQ(plan->expert_bytes_each, largest) << dir;
    EXPECT_EQ(plan->experts_per_token_bytes, largest * c.num_experts_per_tok);
    return *plan;
  };
  const MemoryPlan hf = check(dir_, {});
  EngineConfig q4;
  q4.expert_format = QFormat::kQ4G32;
  q4.dense_format = QFormat::kQ8Row;
  const MemoryPlan hf_q = check(dir_, q4);
  EXPECT_LT(hf_q.expert_total_bytes * 2, hf.expert_total_bytes);  // int4 (+ f32 scales) vs bf16
  EXPECT_LT(hf_q.resident_bytes, hf.resident_bytes);

  ConvertOptions o;  // default policy: q4_g64 experts, q8 dense and embeddings
  o.in_dir = dir_;
  o.out_dir = dir_ + "_container_plan";
  std::filesystem::remove_all(o.out_dir);
  auto conv = ConvertCheckpoint(o);
  ASSERT_TRUE(conv.ok()) << conv.status();
  const MemoryPlan ct = check(o.out_dir, {});
  EXPECT_LT(ct.expert_total_bytes, hf.expert_total_bytes);
  EXPECT_LT(ct.resident_bytes, hf.resident_bytes);
}

// Teacher-forced drafts in one call: one per slot, the main model's argmax
// per position (= Score's argmax); bad input named.
TEST_P(EngineTest, TeacherForcedMtpDraftsAndBadInput) {
  auto eng = OpenOrDie(dir_);
  ASSERT_TRUE(eng);
  auto d = eng->TeacherForcedMtpDrafts(kIds);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->draft.size(), kIds.size() - 1);
  EXPECT_EQ(d->main_argmax.size(), kIds.size());
  auto rows = eng->Score(kIds);
  ASSERT_TRUE(rows.ok());
  for (size_t i = 0; i < kIds.size(); ++i) EXPECT_EQ(d->main_argmax[i], (*rows)[i].argmax) << i;
  const std::vector<int32_t> one = {kIds[0]};
  EXPECT_EQ(eng->TeacherForcedMtpDrafts(one).status().code(), absl::StatusCode::kInvalidArgument);
  EngineConfig no_mtp;
  no_mtp.load_mtp = false;
  auto plain = OpenOrDie(dir_, no_mtp);
  ASSERT_TRUE(plain);
  auto s = plain->TeacherForcedMtpDrafts(kIds);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(s.status().message()).find("no MTP layer"), std::string::npos);
}

// The MTP layer produces drafts: deterministic, in the vocabulary, and its
// cache advances like the main model's.
TEST_P(EngineTest, MtpDrafts) {
  auto eng = OpenOrDie(dir_);
  ASSERT_TRUE(eng);
  ASSERT_TRUE(eng->model().has_mtp());
  const auto& c = eng->config();
  std::vector<int32_t> drafts[2];
  for (int rep = 0; rep < 2; ++rep) {
    KvCache cache = eng->NewCache();
    KvCache mtp = KvCache::ForModel(c, KvDtype::kF32, /*mtp=*/true);
    auto f = eng->model().Forward(kIds, cache, true);
    ASSERT_TRUE(f.ok());
    // Draft-extend over the prompt: slot j = (h_j, t_{j+1}).
    const size_t n = kIds.size() - 1;
    auto m = eng->model().MtpForward(std::span(f->hidden).first(n * c.hidden_size), std::span(kIds).subspan(1), mtp);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(mtp.length(), static_cast<int64_t>(n));
    // Recursive drafts from the last slot.
    std::vector<float> h(m->out.end() - c.hidden_size, m->out.end());
    int32_t t = Argmax(m->logits.data() + (n - 1) * c.vocab_size, c.vocab_size);
    drafts[rep].push_back(t);
    for (int k = 0; k < 3; ++k) {
      const int32_t one[1] = {t};
      auto s = eng->model().MtpForward(h, one, mtp);
      ASSERT_TRUE(s.ok());
      t = Argmax(s->logits.data(), c.vocab_size);
      drafts[rep].push_back(t);
      h = s->out;
    }
  }
  EXPECT_EQ(drafts[0], drafts[1]);
  for (int32_t t : drafts[0]) {
    EXPECT_GE(t, 0);
    EXPECT_LT(t, c.vocab_size);
  }
}

TEST_P(EngineTest, KvBf16AgreementUnderF32Numerics) {
  // Under HF numerics the cached values are bf16 already (lossless: checked
  // bitwise); under f32 numerics bf16 storage rounds: measure teacher-forced
  // argmax agreement and the largest logit change.
  for (Numerics num : {Numerics::kHfBf16, Numerics::kF32}) {
    std::vector<float> logits[2];
    int i = 0;
    for (KvDtype kd : {KvDtype::kF32, KvDtype::kBF16}) {
      EngineConfig ec;
      ec.numerics = num;
      ec.kv_dtype = kd;
      auto eng = OpenOrDie(dir_, ec);
      KvCache cache = eng->NewCache();
      auto r = eng->model().Forward(kIds, cache, true);
      ASSERT_TRUE(r.ok());
      logits[i++] = r->logits;
    }
    if (num == Numerics::kHfBf16) {
      EXPECT_EQ(logits[0], logits[1]);
      continue;
    }
    const int64_t V = 97;
    int agree = 0;
    double maxd = 0;
    for (size_t r = 0; r < kIds.size(); ++r) {
      agree += Argmax(logits[0].data() + r * V, V) == Argmax(logits[1].data() + r * V, V);
      for (int64_t v = 0; v < V; ++v) maxd = std::max(maxd, static_cast<double>(std::abs(logits[0][r * V + v] - logits[1][r * V + v])));
    }
    std::printf("kv bf16 vs f32 storage (f32 numerics): argmax %d/%zu equal, max |dlogit| %.4f\n", agree, kIds.size(), maxd);
    EXPECT_GE(agree * 10, static_cast<int>(kIds.size()) * 9);
  }
}

// Int8 DSA index keys (IndexKeys, kv_cache.h): auto picks them where kv_b is
// integer (a default-policy container) and not for bf16 weights; the plan
// counts their bytes; prefill, chunked prefill and one token at a time still
// agree bit for bit; against exact keys the teacher-forced argmax mostly
// agrees (measured, printed: the cost of q8 keys against HF-exact ones).
TEST_P(EngineTest, Int8IndexKeysAutoPlannedBatchInvariantAndClose) {
  ConvertOptions o;  // default policy: q8 dense (kv_b integer)
  o.in_dir = dir_;
  o.out_dir = dir_ + "_container_idx";
  std::filesystem::remove_all(o.out_dir);
  auto conv = ConvertCheckpoint(o);
  ASSERT_TRUE(conv.ok()) << conv.status();
  const bool dsa = spec_.glm;  // DeepSeek-V3 has no indexer: nothing changes
  auto hf = OpenOrDie(dir_);
  ASSERT_TRUE(hf);
  EXPECT_FALSE(hf->index_q8());
  EngineConfig exact_cfg;
  exact_cfg.index_keys = IndexKeys::kExact;
  auto q8 = OpenOrDie(o.out_dir), exact = OpenOrDie(o.out_dir, exact_cfg);
  ASSERT_TRUE(q8 && exact);
  EXPECT_EQ(q8->index_q8(), dsa);
  EXPECT_FALSE(exact->index_q8());
  EXPECT_EQ(q8->NewCache().index_q8(), dsa);
  auto pq = Engine::Plan(o.out_dir, {}), pe = Engine::Plan(o.out_dir, exact_cfg);
  ASSERT_TRUE(pq.ok() && pe.ok());
  const ModelConfig& c = q8->config();
  EXPECT_EQ(pq->kv_bytes_per_token, KvBytesPerToken(c, KvDtype::kF32, dsa));
  if (dsa) EXPECT_LT(pq->kv_bytes_per_token, pe->kv_bytes_per_token);

  const int64_t V = c.vocab_size;
  KvCache a = q8->NewCache();
  auto all = q8->model().Forward(kIds, a, true);
  ASSERT_TRUE(all.ok()) << all.status();
  KvCache b = q8->NewCache();
  for (size_t i = 0; i < kIds.size(); ++i) {
    auto one = q8->model().Forward(std::span(kIds).subspan(i, 1), b, false);
    ASSERT_TRUE(one.ok());
    ASSERT_EQ(0, std::memcmp(one->logits.data(), all->logits.data() + i * V, V * sizeof(float))) << "row " << i;
  }
  KvCache e = exact->NewCache();
  auto ref = exact->model().Forward(kIds, e, true);
  ASSERT_TRUE(ref.ok());
  int agree = 0;
  for (size_t r = 0; r < kIds.size(); ++r)
    agree += Argmax(all->logits.data() + r * V, V) == Argmax(ref->logits.data() + r * V, V);
  std::printf("index keys q8 vs exact (%s): teacher-forced argmax %d/%zu equal\n", dsa ? "GLM-5" : "DSv3", agree,
              kIds.size());
  if (!dsa) EXPECT_EQ(all->logits, ref->logits);
  EXPECT_GE(agree * 10, static_cast<int>(kIds.size()) * 8);
  std::filesystem::remove_all(o.out_dir);
}

// The one fit check of moe run and inferd: a RAM budget below the resident
// weights + KV is refused naming both; a large one leaves the rest to the
// expert cache.
TEST_P(EngineTest, MemoryFitRefusesATooSmallBudgetAndSizesTheExpertCache) {
  auto plan = Engine::Plan(dir_, EngineConfig{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const int64_t kv_tokens = 100, fixed = plan->resident_bytes + plan->kv_bytes_per_token * kv_tokens;
  auto small = FitMemoryPlan(dir_, static_cast<uint64_t>(fixed - 1), kv_tokens, EngineConfig{});
  ASSERT_EQ(small.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string msg(small.status().message());
  EXPECT_NE(msg.find(absl::StrCat("resident weights ", plan->resident_bytes, " B")), std::string::npos) << msg;
  EXPECT_NE(msg.find("for 100 tokens"), std::string::npos) << msg;
  auto fit = FitMemoryPlan(dir_, static_cast<uint64_t>(fixed + 12345), kv_tokens, EngineConfig{});
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->config.expert_budget_bytes, 12345);
  EXPECT_EQ(fit->plan.expert_cache_bytes, std::min<int64_t>(12345, plan->expert_total_bytes));
  EXPECT_EQ(fit->kv_bytes, plan->kv_bytes_per_token * kv_tokens);
  // No budget: the caller's expert budget stays.
  EngineConfig base;
  base.expert_budget_bytes = 777;
  auto unlimited = FitMemoryPlan(dir_, 0, kv_tokens, base);
  ASSERT_TRUE(unlimited.ok()) << unlimited.status();
  EXPECT_EQ(unlimited->config.expert_budget_bytes, 777);
}

INSTANTIATE_TEST_SUITE_P(Arch, EngineTest, ::testing::Values(true, false),
                         [](const auto& i) { return i.param ? std::string("glm") : std::string("deepseek_v3"); });

TEST(ExpertStore, LruBudgetAndLeases) {
  int loads = 0;
  auto loader = [&](int layer, int e) -> absl::StatusOr<OwnedExpert> {
    if (e >= 4) return absl::NotFoundError("no such expert");
    ++loads;
    OwnedExpert x;
    for (OwnedMatrix* m : {&x.gate, &x.up, &x.down}) {
      m->m.format = QFormat::kF32;
      m->m.rows = 2;
      m->m.cols = 2;
      m->data.assign(16, static_cast<uint8_t>(layer * 10 + e));
      m->m.data = m->data.data();
    }
    return x;
  };
  LocalExpertSource store(loader, 2 * 48);  // room for two experts
  ASSERT_TRUE(store.Get(0, 0).ok());
  ASSERT_TRUE(store.Get(0, 1).ok());
  ASSERT_TRUE(store.Get(0, 0).ok());  // hit; 0 is now the most recent
  EXPECT_EQ(loads, 2);
  ASSERT_TRUE(store.Get(0, 2).ok());  // evicts 1 (least recent)
  ASSERT_TRUE(store.Get(0, 0).ok());  // still resident
  EXPECT_EQ(loads, 3);
  ASSERT_TRUE(store.Get(0, 1).ok());  // reload
  EXPECT_EQ(loads, 4);
  EXPECT_EQ(store.Stats().resident_bytes, 2 * 48);
  {
    // Leased experts are never evicted, even over budget.
    auto a = store.Get(1, 0), b = store.Get(1, 1), c = store.Get(1, 2);
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    EXPECT_EQ(store.Stats().resident_bytes, 3 * 48);
    EXPECT_EQ((*a)->gate.data[0], 10);
    EXPECT_EQ((*c)->gate.data[0], 12);
  }
  EXPECT_LE(store.Stats().resident_bytes, 2 * 48);
  EXPECT_FALSE(store.Get(0, 7).ok());
  const auto st = store.Stats();
  EXPECT_EQ(st.gets, 10);
  EXPECT_EQ(st.hits, 2);
  EXPECT_EQ(st.misses, 8);
  EXPECT_GE(st.evictions, 3);
  ExpertLease moved;
  {
    auto l = store.Get(1, 3);
    ASSERT_TRUE(l.ok());
    moved = std::move(*l);
  }
  EXPECT_TRUE(static_cast<bool>(moved));
  moved.Reset();
  EXPECT_FALSE(static_cast<bool>(moved));
}

}  // namespace
}  // namespace moe
