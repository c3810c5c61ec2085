// `moe run --expertd` and `moe run --record-routing` as real processes: the
// models/tiny-glm-random checkpoint converted to a container, one expertd,
// several `moe run` workers. Greedy output through expertd must equal the
// in-process store's for every budget (including one smaller than one
// token's working set: 2 MoE layers x top-4 = 8 experts, budget 4), with
// prefetch on and off, with two workers running at once; a second worker's
// reads are shared-memory hits (expertd's admin Stats: no new disk reads).
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/expertstore/routing_trace.h"
#include "common/format/container.h"
#include "common/format/convert.h"
#include "services/expertd_client/client.h"

extern char** environ;

namespace moe {
namespace {

namespace fs = std::filesystem;
const std::string kExpertd = MOE_BINARY_DIR "/services/expertd/expertd";
const std::string kMoe = MOE_BINARY_DIR "/tools/moe/moe";
const std::string kTiny = MOE_SOURCE_DIR "/models/tiny-glm-random";
const std::string kPrompt = "5,17,3,88,42,42,7,61,900,1200,33,2";

struct RunOut {
  int rc = -1;
  nlohmann::json j;
  std::string raw;
};

// Runs a command line; parses the last stdout line as JSON.
RunOut Sh(const std::string& cmd) {
  RunOut r;
  FILE* p = ::popen((cmd + " 2>/dev/null").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) r.raw.append(buf, n);
  int st = ::pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  auto nl = r.raw.find_last_of('\n', r.raw.size() >= 2 ? r.raw.size() - 2 : 0);
  std::string last = r.raw.substr(nl == std::string::npos ? 0 : nl + 1);
  r.j = nlohmann::json::parse(last, nullptr, /*allow_exceptions=*/false);
  return r;
}

class MoeRunExpertd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("moe_run_expertd_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ConvertOptions o;
    o.in_dir = kTiny;
    o.out_dir = (dir_ / "container").string();
    auto r = ConvertCheckpoint(o);
    ASSERT_TRUE(r.ok()) << r.status();
    auto c = Container::Open(o.out_dir);
    ASSERT_TRUE(c.ok()) << c.status();
    // Records come in size classes (int4 MoE experts, int8 MTP experts);
    // expertd's floor is top-k slabs of each class.
    std::set<uint64_t> classes;
    for (const auto& rec : (*c)->records()) {
      const uint64_t a = (rec.length + 4095) / 4096 * 4096;
      all_bytes_ += a;
      classes.insert(a);
    }
    for (uint64_t a : classes) floor_bytes_ += 4 * a;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  void TearDown() override { StopExpertd(); }

  void StartExpertd(uint64_t budget_bytes, const std::string& manifest = "", const std::string& top_k = "4") {
    StopExpertd();
    std::string name = "e";  // appended, not "e" + ...: g++ 12 warns a false -Wrestrict on that
    name += std::to_string(++starts_);
    name += ".sock";
    sock_ = (dir_ / name).string();
    std::vector<std::string> args = {kExpertd, manifest.empty() ? "--model" : "--manifest",
                                     manifest.empty() ? container() : manifest, "--socket", sock_, "--budget",
                                     std::to_string(budget_bytes), "--top-k", top_k, "--log-level", "warning"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ASSERT_EQ(posix_spawn(&pid_, argv[0], nullptr, nullptr, argv.data(), environ), 0);
    for (int i = 0; i < 300 && !fs::exists(sock_); ++i) usleep(20000);
    ASSERT_TRUE(fs::exists(sock_));
  }
  void StopExpertd() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int st;
      ::waitpid(pid_, &st, 0);
      pid_ = -1;
    }
  }
  static std::string container() { return (dir_ / "container").string(); }
  std::string RunCmd(const std::string& extra) const {
    return kMoe + " run --model " + container() + " --prompt-ids " + kPrompt + " --max-tokens 12 --json " + extra;
  }
  // Disk + page-cache reads expertd has done so far.
  uint64_t StoreReads() const {
    auto admin = expertd::ExpertdClient::ConnectAdmin(sock_);
    EXPECT_TRUE(admin.ok());
    if (!admin.ok()) return 0;
    auto s = (*admin)->Stats();
    EXPECT_TRUE(s.ok());
    uint64_t n = 0;
    for (const auto& t : s->tiers())
      if (t.tier() == "disk" || t.tier() == "pagecache") n += t.hits();
    return n;
  }

  static inline fs::path dir_;
  static inline uint64_t all_bytes_ = 0, floor_bytes_ = 0;
  std::string sock_;
  pid_t pid_ = -1;
  int starts_ = 0;
};

TEST_F(MoeRunExpertd, GreedyOutputEqualsInProcessForEveryBudgetAndTwoWorkersShareTheCache) {
  RunOut want = Sh(RunCmd(""));
  ASSERT_EQ(want.rc, 0) << want.raw;
  ASSERT_TRUE(want.j.contains("tokens")) << want.raw;
  ASSERT_EQ(want.j["tokens"].size(), 12u);
  // expertd's floor (4 slabs per size class: fewer than one token's 8
  // MoE-layer experts, so every layer evicts), twice that, everything.
  for (uint64_t budget : {floor_bytes_, 2 * floor_bytes_, all_bytes_}) {
    SCOPED_TRACE("budget " + std::to_string(budget) + " bytes");
    StartExpertd(budget);
    // Two workers at once, prefetch on in one and off in the other.
    auto a = std::async(std::launch::async, [&] { return Sh(RunCmd("--expertd " + sock_)); });
    auto b = std::async(std::launch::async, [&] { return Sh(RunCmd("--expertd " + sock_ + " --no-prefetch")); });
    RunOut ra = a.get(), rb = b.get();
    ASSERT_EQ(ra.rc, 0) << ra.raw;
    ASSERT_EQ(rb.rc, 0) << rb.raw;
    EXPECT_EQ(ra.j["tokens"], want.j["tokens"]);
    EXPECT_EQ(rb.j["tokens"], want.j["tokens"]);
    // A third worker after them: with the whole model cached its reads are
    // all hits, through shared memory, and expertd reads nothing new.
    const uint64_t reads_before = StoreReads();
    RunOut rc = Sh(RunCmd("--expertd " + sock_));
    ASSERT_EQ(rc.rc, 0) << rc.raw;
    EXPECT_EQ(rc.j["tokens"], want.j["tokens"]);
    const int64_t gets = rc.j["stats"]["expert_gets"];
    EXPECT_GT(gets, 0);
    if (budget == all_bytes_) {
      EXPECT_EQ(rc.j["stats"]["expert_misses"].get<int64_t>(), 0);
      EXPECT_EQ(rc.j["stats"]["expert_hits"].get<int64_t>(), gets);
      EXPECT_EQ(StoreReads(), reads_before);
    } else if (budget == floor_bytes_) {
      EXPECT_GT(rc.j["stats"]["expert_misses"].get<int64_t>(), 0);  // every layer evicts
      EXPECT_GT(StoreReads(), reads_before);
    }
  }
}

TEST_F(MoeRunExpertd, RecordRoutingWritesATraceTheCacheBenchReads) {
  const std::string trace = (dir_ / "routing.txt").string();
  // Plain decode: the counts below are its positions (speculation adds the MTP layer's draft rows).
  RunOut r = Sh(RunCmd("--record-routing " + trace + " --speculative off"));
  ASSERT_EQ(r.rc, 0) << r.raw;
  auto t = expertstore::LoadTrace(trace);
  ASSERT_TRUE(t.ok()) << t.status();
  // tiny-glm-random: 3 decoder layers (layer 0 dense) + MTP, 16 experts, top-4.
  EXPECT_EQ(t->num_layers, 4u);
  EXPECT_EQ(t->num_experts, 16u);
  EXPECT_EQ(t->top_k, 4u);
  // 12 prompt tokens + 11 decoded (the last token is never fed back).
  EXPECT_EQ(t->num_tokens, 23u);
  EXPECT_EQ(t->keys.size(), size_t(23) * 2 * 4);
  // Version 2: each token's layer-2 row carries the look-ahead made at layer 1.
  ASSERT_EQ(t->ahead.size(), size_t(23) * 2);
  for (size_t r = 0; r < t->ahead.size(); ++r) {
    ASSERT_EQ(t->ahead[r].size(), r % 2 == 0 ? 4u : 0u) << r;
    for (uint32_t k : t->ahead[r]) EXPECT_EQ(k / 16, 2u);
  }
  std::ifstream in(trace);
  std::string header, line;
  std::getline(in, header);
  std::getline(in, line);
  std::istringstream ls(line);
  int pos, layer;
  ls >> pos >> layer;
  EXPECT_EQ(header.rfind("moestream-routing-trace 2 ", 0), 0u) << header;
  EXPECT_EQ(pos, 0);
  EXPECT_EQ(layer, 1);  // first MoE layer
  RunOut bench = Sh(kMoe + " bench cache --trace " + trace + " --budget 8 --expert-bytes 1 --lookahead --json");
  ASSERT_EQ(bench.rc, 0) << bench.raw;
}

TEST_F(MoeRunExpertd, BadExpertdAddressOrCheckpointIsAClearError) {
  RunOut r = Sh(RunCmd("--expertd " + (dir_ / "nothing.sock").string()));
  EXPECT_EQ(r.rc, 2);  // InvalidArgument: no such socket
  std::string err;
  {
    FILE* p = ::popen((kMoe + " run --model " + kTiny + " --prompt-ids 1,2 --expertd " + container() + "/moestream.json 2>&1").c_str(), "r");
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof buf, p)) err.append(buf, n);
    EXPECT_NE(::pclose(p), 0);
  }
  EXPECT_NE(err.find("converted container"), std::string::npos) << err;
}

// moe synth + moe bench e2e on a tiny slice (the GLM-5-sized run is a
// benchmark, docs/BENCHMARKS.md): the slice is what expertd serves, and the
// bench reports a run per (budget, prefetch) with hits at a full budget and
// the --dense-ms work it was asked for.
TEST_F(MoeRunExpertd, SynthSliceServesTheE2eBench) {
  const std::string slice = (dir_ / "slice").string();
  RunOut w = Sh(kMoe + " synth --out " + slice + " --layers 2 --experts 16 --hidden 256 --moe-intermediate 128");
  ASSERT_EQ(w.rc, 0) << w.raw;
  std::ifstream js(slice + "/slice.json");
  auto j = nlohmann::json::parse(js, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  const uint64_t rec = j["record_bytes"];
  // q4_g64: 3 matrices of 128 x 256 nibbles + f32 scales per 64 inputs.
  EXPECT_EQ(rec, 3u * (128 * 128 + 128 * 4 * 4));
  StartExpertd(32 * 4096 * ((rec + 4095) / 4096), slice + "/slice.manifest", "8");
  RunOut b = Sh(kMoe + " bench e2e --slice " + slice + " --expertd " + sock_ +
                " --tokens 4 --warmup 8 --budgets 50,100 --dense-ms 2 --json 2>&1");
  ASSERT_EQ(b.rc, 0) << b.raw;
  auto out = nlohmann::json::parse(b.raw.substr(b.raw.find('{')), nullptr, false);
  ASSERT_FALSE(out.is_discarded()) << b.raw;
  ASSERT_EQ(out["runs"].size(), 4u);
  EXPECT_GT(out["raw_read_gbps"][0].get<double>(), 0);
  for (const auto& r : out["runs"]) {
    EXPECT_GT(r["tokens_per_second"].get<double>(), 0);
    EXPECT_GT(r["vs_floor"].get<double>(), 0);
    // --dense-ms: at least 2 ms of kernel work per layer of every timed token.
    EXPECT_GE(r["dense_seconds"].get<double>(), 4 * 2 * 0.002) << r.dump();
  }
  EXPECT_EQ(out["dense_ms_per_layer"].get<double>(), 2.0);
  // Full budget after 8 warm-up tokens of 2 x top-8 of 16 experts: hits.
  EXPECT_GT(out["runs"][2]["hit_rate"].get<double>(), 0.5);
  // Bad input: an unknown format, a slice directory without slice.json.
  EXPECT_EQ(Sh(kMoe + " synth --out " + slice + "2 --format q5_x").rc, 2);
  EXPECT_NE(Sh(kMoe + " bench e2e --slice " + (dir_ / "none").string() + " --expertd " + sock_).rc, 0);
  RunOut neg = Sh("(" + kMoe + " bench e2e --slice " + slice + " --expertd " + sock_ + " --dense-ms -1 2>&1)");
  EXPECT_NE(neg.rc, 0);
  EXPECT_NE(neg.raw.find("--dense-ms must be in [0, 10000] (got -1)"), std::string::npos) << neg.raw;
}

// moe synth --from-container: a slice over the container's own MoE-layer
// records (renumbered, not copied) that expertd and the e2e bench serve.
TEST_F(MoeRunExpertd, SliceOfAContainerServesTheE2eBench) {
  const std::string slice = (dir_ / "cslice").string();
  RunOut w = Sh(kMoe + " synth --from-container " + container() + " --out " + slice);
  ASSERT_EQ(w.rc, 0) << w.raw;
  std::ifstream js(slice + "/slice.json");
  auto j = nlohmann::json::parse(js, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["layers"].get<int>(), 2);  // tiny-glm-random: layers 1 and 2 are MoE (0 dense, 3 MTP)
  EXPECT_EQ(j["experts"].get<int>(), 16);
  EXPECT_EQ(j["top_k"].get<int>(), 4);
  EXPECT_EQ(j["format"].get<std::string>(), "q4_g64");
  const uint64_t rec = j["record_bytes"];
  StartExpertd(32 * ((rec + 4095) / 4096 * 4096), slice + "/slice.manifest", "4");
  RunOut b = Sh(kMoe + " bench e2e --slice " + slice + " --expertd " + sock_ +
                " --tokens 4 --warmup 4 --budgets 100 --json 2>&1");
  ASSERT_EQ(b.rc, 0) << b.raw;
  auto out = nlohmann::json::parse(b.raw.substr(b.raw.find('{')), nullptr, false);
  ASSERT_FALSE(out.is_discarded()) << b.raw;
  ASSERT_EQ(out["runs"].size(), 2u);
  for (const auto& r : out["runs"]) EXPECT_GT(r["tokens_per_second"].get<double>(), 0);
  // Not a container: named.
  RunOut bad = Sh("(" + kMoe + " synth --from-container " + (dir_ / "none").string() + " --out " + slice + "2 2>&1)");
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.raw.find("none"), std::string::npos) << bad.raw;
}

}  // namespace
}  // namespace moe
