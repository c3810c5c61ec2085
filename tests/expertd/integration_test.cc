// Starts the real expertd binary on a unix socket and drives it with real
// worker processes (expertd_test_worker) and an in-process client.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <atomic>
#include <thread>

#include "common/format/crc32c.h"
#include "services/expertd_client/client.h"
#include "tests/expertstore/synthetic_model.h"

extern char** environ;

namespace moe::expertd {
namespace {

using expertstore::testing::MakeTempDir;
using expertstore::testing::WriteSyntheticModel;

constexpr uint64_t kRec = 60 * 1024;  // 60 KiB records, 60 KiB slabs
const std::string kBin = MOE_BINARY_DIR "/services/expertd/expertd";
const std::string kWorker = MOE_BINARY_DIR "/tests/expertd/expertd_test_worker";

struct Proc {
  pid_t pid = -1;
  FILE* out = nullptr;  // child's stdout
  std::string err_path;
  int Wait() {
    int st = 0;
    ::waitpid(pid, &st, 0);
    pid = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  std::string Line() {
    char buf[4096];
    return std::fgets(buf, sizeof buf, out) ? std::string(buf) : std::string();
  }
  std::string Stderr() const {
    std::ifstream f(err_path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  ~Proc() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      Wait();
    }
    if (out) std::fclose(out);
  }
};

std::unique_ptr<Proc> Spawn(const std::vector<std::string>& args, const std::string& err_path) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return nullptr;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  auto proc = std::make_unique<Proc>();
  proc->err_path = err_path;
  int r = posix_spawn(&proc->pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(p[1]);
  if (r != 0) {
    ::close(p[0]);
    return nullptr;
  }
  proc->out = ::fdopen(p[0], "r");
  return proc;
}

class ExpertdIntegration : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("expertd");
    model_ = WriteSyntheticModel(dir_, 4, 16, [](int, int) { return kRec; }, 2, "it-model");
    sock_ = dir_ + "/expertd.sock";
  }
  // Starts expertd with `slabs` slabs of budget; waits for "expertd ready".
  std::unique_ptr<Proc> StartExpertd(uint64_t slabs, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {kBin, "--manifest", model_.manifest, "--socket", sock_, "--budget",
                                     std::to_string(slabs * kRec), "--top-k", "2", "--queue-depth", "4",
                                     "--heat-file", dir_ + "/heat.bin", "--wait-ms", "3000"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto p = Spawn(args, dir_ + "/expertd.err");
    if (!p) return nullptr;
    std::string line = p->Line();
    EXPECT_NE(line.find("expertd ready"), std::string::npos) << line << p->Stderr();
    return p;
  }
  uint32_t Crc(int layer, int expert) {
    for (auto& [k, r] : model_.recs)
      if (k.first == layer && k.second == expert) return r.crc32c;
    return 0;
  }
  std::string dir_, sock_;
  expertstore::testing::SyntheticModel model_;
};

TEST_F(ExpertdIntegration, TwoWorkerProcessesShareOneCache) {
  auto d = StartExpertd(16);
  ASSERT_TRUE(d);
  auto w1 = Spawn({kWorker, sock_, "fetch", "1", "0", "3", "5", "9"}, dir_ + "/w1.err");
  std::vector<std::string> lines1;
  for (std::string l; !(l = w1->Line()).empty();) lines1.push_back(l);
  ASSERT_EQ(w1->Wait(), 0) << w1->Stderr();
  ASSERT_EQ(lines1.size(), 4u);
  char want[32];
  std::snprintf(want, sizeof want, "ok 3 %08x\n", Crc(1, 3));
  EXPECT_EQ(lines1[1], want);

  auto admin = ExpertdClient::ConnectAdmin(sock_);
  ASSERT_TRUE(admin.ok());
  auto s1 = (*admin)->Stats();
  ASSERT_TRUE(s1.ok()) << s1.status();
  uint64_t disk1 = s1->tiers(3).hits() + s1->tiers(2).hits();
  EXPECT_EQ(disk1, 4u);

  // Second process: the same experts are hits now (shared memory, no reads).
  auto w2 = Spawn({kWorker, sock_, "fetch", "1", "0", "3", "5", "9"}, dir_ + "/w2.err");
  std::vector<std::string> lines2;
  for (std::string l; !(l = w2->Line()).empty();) lines2.push_back(l);
  ASSERT_EQ(w2->Wait(), 0);
  EXPECT_EQ(lines2, lines1);
  auto s2 = (*admin)->Stats();
  EXPECT_EQ(s2->tiers(3).hits() + s2->tiers(2).hits(), disk1);  // no new reads
  EXPECT_EQ(s2->slabs_ready(), 4u);                              // memory counted once
  EXPECT_EQ(s2->resident_bytes(), 4 * kRec);
  EXPECT_GE(s2->shm_hits(), 4u);
  // The admin RPC shows the placement policy (the default heat order: no model).
  EXPECT_EQ(s2->policy(), "heat");
  EXPECT_EQ(s2->policy_weights_size(), 0);

  auto heat = (*admin)->Heat();
  ASSERT_TRUE(heat.ok());
  EXPECT_EQ(heat->heat_size(), 4 * 16);
  EXPECT_EQ(heat->placement(16 + 3) & 1u, 1u);
  EXPECT_GT(heat->heat(16 + 3), 0.0);

  ::kill(d->pid, SIGTERM);
  EXPECT_EQ(d->Wait(), 0) << d->Stderr();
  EXPECT_EQ(::access((dir_ + "/heat.bin").c_str(), F_OK), 0);  // heat persisted on SIGTERM
}

TEST_F(ExpertdIntegration, KilledWorkerReleasesItsLeasesWithinOneSecond) {
  auto d = StartExpertd(2);  // exactly one layer's top-2
  ASSERT_TRUE(d);
  auto holder = Spawn({kWorker, sock_, "hold", "0", "1", "2"}, dir_ + "/hold.err");
  std::string l;
  while (!(l = holder->Line()).empty() && l.rfind("held", 0) != 0) {
  }
  ASSERT_EQ(l, "held 2\n") << holder->Stderr();
  auto c = ExpertdClient::Connect(sock_, "test");
  ASSERT_TRUE(c.ok()) << c.status();
  ::kill(holder->pid, SIGKILL);
  holder->Wait();
  auto t0 = std::chrono::steady_clock::now();
  auto r = (*c)->Acquire(2, {7, 8});  // needs both slabs: waits for the reclaim
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r[0].ok()) << r[0].status();
  ASSERT_TRUE(r[1].ok()) << r[1].status();
  EXPECT_LT(secs, 1.0);
  EXPECT_EQ(crc32c::Extend(0, r[1]->data, r[1]->length), Crc(2, 8));
  (*c)->Release(*r[0]);
  (*c)->Release(*r[1]);
}

// The streaming FetchExperts: AcquireEach hands over the shm hits first
// (marked as hits), then each miss as expertd streams it; a bad id fails only
// itself; every index once, with the record's bytes.
TEST_F(ExpertdIntegration, AcquireEachStreamsHitsFirstThenEachMiss) {
  auto d = StartExpertd(16);
  ASSERT_TRUE(d);
  auto c = ExpertdClient::Connect(sock_, "test");
  ASSERT_TRUE(c.ok()) << c.status();
  for (auto& r : (*c)->Acquire(1, {0, 3})) {
    ASSERT_TRUE(r.ok()) << r.status();
    (*c)->Release(*r);
  }
  const std::vector<int> ids = {5, 0, 3, 99, 9, 12};
  std::vector<size_t> order;
  std::vector<int> seen(ids.size(), 0);
  std::vector<bool> hit(ids.size(), false);
  (*c)->AcquireEach(1, ids, [&](size_t i, absl::StatusOr<expertstore::Lease> l, bool shm_hit) {
    ASSERT_LT(i, ids.size());
    order.push_back(i);
    ++seen[i];
    hit[i] = shm_hit;
    if (ids[i] == 99) {
      EXPECT_FALSE(l.ok());
      return;
    }
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_EQ(l->expert, ids[i]);
    EXPECT_EQ(crc32c::Extend(0, l->data, l->length), Crc(1, ids[i]));
    (*c)->Release(*l);
  });
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(seen[i], 1) << "index " << i;
  ASSERT_EQ(order.size(), ids.size());
  EXPECT_EQ((std::vector<size_t>(order.begin(), order.begin() + 2)), (std::vector<size_t>{1, 2}));  // the hits
  EXPECT_TRUE(hit[1] && hit[2]);
  EXPECT_FALSE(hit[0] || hit[4] || hit[5]);
  auto admin = ExpertdClient::ConnectAdmin(sock_);
  ASSERT_TRUE(admin.ok());
  auto st = (*admin)->Stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->slabs_leased(), 0u);  // every lease handed over was released
}

TEST_F(ExpertdIntegration, WorkersReconnectAfterAnExpertdRestartUnderLoad) {
  auto d = StartExpertd(8);
  ASSERT_TRUE(d);
  auto c = ExpertdClient::Connect(sock_);
  ASSERT_TRUE(c.ok());
  auto held = (*c)->Acquire(0, {1, 2});
  ASSERT_TRUE(held[0].ok() && held[1].ok());
  std::atomic<bool> stop{false};
  std::atomic<int> ok_after{0}, errors{0};
  std::thread load([&] {  // keeps fetching while expertd goes away and comes back
    for (int i = 0; !stop; ++i) {
      auto r = (*c)->Acquire(1 + i % 3, {i % 16, (i + 5) % 16});
      for (auto& x : r) {
        if (x.ok()) {
          if (crc32c::Extend(0, x->data, x->length) != Crc(1 + i % 3, x->expert)) errors++;
          (*c)->Release(*x);
          if ((*c)->reconnects() > 0) ok_after++;
        }
      }
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ::kill(d->pid, SIGKILL);  // crash, not a clean stop
  d->Wait();
  d = StartExpertd(8);
  ASSERT_TRUE(d);
  for (int i = 0; i < 300 && ok_after < 20; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  stop = true;
  load.join();
  EXPECT_GE((*c)->reconnects(), 1u);
  EXPECT_GE(ok_after.load(), 20);
  EXPECT_EQ(errors.load(), 0);
  // Leases from the crashed instance stay readable; releasing them is harmless.
  EXPECT_EQ(crc32c::Extend(0, held[1]->data, held[1]->length), Crc(0, 2));
  (*c)->Release(*held[0]);
  (*c)->Release(*held[1]);
}

// FetchRequest.prefill acts: a prefill pass over a whole layer (each expert
// released once used, as the pipelined engine does) is streamed without
// evicting the decode working set, and expertd's Stats count it.
TEST_F(ExpertdIntegration, PrefillFetchesStreamWithoutEvictingTheDecodeSet) {
  auto d = StartExpertd(8);
  ASSERT_TRUE(d);
  auto c = ExpertdClient::Connect(sock_);
  ASSERT_TRUE(c.ok());
  const std::vector<int> decode = {0, 1, 2, 3, 4, 5};
  for (int k = 0; k < 10; ++k) {
    for (auto& l : (*c)->Acquire(0, decode)) {
      ASSERT_TRUE(l.ok()) << l.status();
      (*c)->Release(*l);
    }
  }
  std::vector<int> layer(16);
  for (int e = 0; e < 16; ++e) layer[e] = e;
  int ok = 0;
  (*c)->AcquireEach(
      1, layer,
      [&](size_t i, absl::StatusOr<expertstore::Lease> l, bool) {
        ASSERT_TRUE(l.ok()) << l.status();
        EXPECT_EQ(crc32c::Extend(0, l->data, l->length), Crc(1, layer[i]));
        (*c)->Release(*l);
        ++ok;
      },
      nullptr, /*prefill=*/true);
  EXPECT_EQ(ok, 16);
  auto admin = ExpertdClient::ConnectAdmin(sock_);
  ASSERT_TRUE(admin.ok());
  auto st = (*admin)->Stats();
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->prefill_requests(), 16u);
  EXPECT_EQ(st->prefill_fills(), 16u);
  EXPECT_EQ(st->prefill_decode_evictions(), 0u);  // 2 free slabs, recycled
  auto heat = (*admin)->Heat();
  ASSERT_TRUE(heat.ok()) << heat.status();
  for (int e : decode) EXPECT_TRUE(heat->placement(e) & 1) << "decode expert " << e << " evicted";
}

TEST_F(ExpertdIntegration, InvalidIdsAndLayersAreRejected) {
  auto d = StartExpertd(8);
  ASSERT_TRUE(d);
  auto c = ExpertdClient::Connect(sock_);
  ASSERT_TRUE(c.ok());
  auto r = (*c)->Acquire(0, {16, -3, 2, 70000});
  EXPECT_EQ(r[0].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r[1].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(r[2].ok());
  EXPECT_EQ(r[3].status().code(), absl::StatusCode::kInvalidArgument);
  auto bad_layer = (*c)->Acquire(9, {0});
  EXPECT_EQ(bad_layer[0].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(bad_layer[0].status().message()).find("invalid layer 9"), std::string::npos);
  EXPECT_EQ((*c)->Pin(9, 0, true).code(), absl::StatusCode::kInvalidArgument);
  // More ids in one fetch than the layer has experts: refused whole, by name.
  auto too_many = (*c)->Acquire(1, std::vector<int>(17, 3));
  ASSERT_EQ(too_many.size(), 17u);
  EXPECT_EQ(too_many[0].status().code(), absl::StatusCode::kInvalidArgument) << too_many[0].status();
  EXPECT_NE(std::string(too_many[0].status().message()).find("17 experts in one fetch"), std::string::npos)
      << too_many[0].status();
  (*c)->Release(*r[2]);
  EXPECT_EQ(::kill(d->pid, 0), 0);  // still serving
}

TEST_F(ExpertdIntegration, CorruptAndTruncatedShardsFailOnlyTheirRecords) {
  // Corrupt (layer 0, expert 4) in shard 0; truncate shard 1 inside (layer 3, 15).
  const auto& bad = model_.recs[4].second;
  int fd = ::open(model_.files[0].c_str(), O_WRONLY);
  uint8_t x = 0xee;
  ASSERT_EQ(::pwrite(fd, &x, 1, bad.offset + 5), 1);
  ::close(fd);
  const auto& last = model_.recs.back().second;
  ASSERT_EQ(::truncate(model_.files[1].c_str(), last.offset + 4096), 0);
  auto d = StartExpertd(8, {"--no-page-cache"});
  ASSERT_TRUE(d);
  auto c = ExpertdClient::Connect(sock_);
  ASSERT_TRUE(c.ok());
  auto r = (*c)->Acquire(0, {3, 4});
  EXPECT_TRUE(r[0].ok());
  EXPECT_EQ(r[1].status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(std::string(r[1].status().message()).find("checksum mismatch"), std::string::npos);
  auto t = (*c)->Acquire(3, {15, 14});
  EXPECT_EQ(t[0].status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(std::string(t[0].status().message()).find("short read"), std::string::npos) << t[0].status();
  EXPECT_TRUE(t[1].ok());
  auto s = (*c)->Stats();
  EXPECT_EQ(s->read_errors(), 2u);
}

TEST_F(ExpertdIntegration, BudgetBelowOneLayersTopKIsRefusedAtStart) {
  auto p = Spawn({kBin, "--manifest", model_.manifest, "--socket", sock_, "--budget", std::to_string(kRec),
                  "--top-k", "2"},
                 dir_ + "/refused.err");
  EXPECT_EQ(p->Wait(), 2);
  std::string err = p->Stderr();
  EXPECT_NE(err.find("smaller than one layer's top-2"), std::string::npos) << err;
}

TEST_F(ExpertdIntegration, AdminPinBudgetAndMetrics) {
  auto d = StartExpertd(8, {"--metrics-addr", "127.0.0.1:0"});
  ASSERT_TRUE(d);
  auto c = ExpertdClient::Connect(sock_);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE((*c)->Pin(1, 1, true).ok());
  auto b = (*c)->SetBudget(4 * kRec);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, 4 * kRec);
  EXPECT_EQ((*c)->SetBudget(100 * kRec).status().code(), absl::StatusCode::kInvalidArgument);
  auto s = (*c)->Stats();
  EXPECT_EQ(s->slabs_active(), 4u);
  auto h = (*c)->Heat();
  EXPECT_EQ(h->placement(16 + 1) & 4u, 4u);
  // Wildcard metric binds are refused.
  auto p = Spawn({kBin, "--manifest", model_.manifest, "--socket", dir_ + "/x.sock", "--budget", "1M",
                  "--top-k", "2", "--metrics-addr", "0.0.0.0:9464"},
                 dir_ + "/wild.err");
  EXPECT_EQ(p->Wait(), 2);
  EXPECT_NE(p->Stderr().find("wildcard"), std::string::npos);
}

// GET /metrics over plain HTTP/1.0 on loopback.
std::string Scrape(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string body;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (::write(fd, req.data(), req.size()) == ssize_t(req.size())) {
      char buf[8192];
      ssize_t n;
      while ((n = ::read(fd, buf, sizeof buf)) > 0) body.append(buf, size_t(n));
    }
  }
  ::close(fd);
  return body;
}

// Value of the first sample line starting with `series` ("name" or "name{labels}").
double Metric(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(series, 0) == 0 && line.size() > series.size() &&
        (line[series.size()] == ' ' || line[series.size()] == '{'))
      return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

TEST_F(ExpertdIntegration, PrometheusMetricsAreServedAndMove) {
  auto d = StartExpertd(8, {"--metrics-addr", "127.0.0.1:0", "--no-page-cache"});
  ASSERT_TRUE(d);
  // The log names the bound port.
  int port = 0;
  for (int i = 0; i < 100 && port == 0; ++i) {
    const std::string err = d->Stderr();
    auto at = err.find("metrics on http://127.0.0.1:");
    if (at != std::string::npos) port = std::atoi(err.c_str() + at + 28);
    if (port == 0) usleep(10000);
  }
  ASSERT_GT(port, 0) << d->Stderr();
  const std::string m0 = Scrape(port);
  ASSERT_NE(m0.find("200 OK"), std::string::npos) << m0;
  for (const char* name :
       {"moe_expertd_tier_hits_total", "moe_expertd_tier_bytes_total", "moe_expertd_requests_total",
        "moe_expertd_shm_hits_total", "moe_expertd_evictions_total", "moe_expertd_read_errors_total",
        "moe_expertd_prefetch_issued_total", "moe_expertd_prefetch_used_total", "moe_expertd_prefetch_refused_total",
        "moe_expertd_arena_bytes", "moe_expertd_budget_bytes", "moe_expertd_resident_bytes",
        "moe_expertd_slabs_ready", "moe_expertd_slabs_leased", "moe_expertd_sessions", "moe_expertd_io_inflight",
        "moe_expertd_io_queue_depth", "moe_expertd_read_gbps", "moe_expertd_policy_horizon_tokens",
        "moe_expertd_lookahead_kept_total"})
    EXPECT_NE(m0.find(std::string("# TYPE ") + name), std::string::npos) << name;
  EXPECT_EQ(Metric(m0, "moe_expertd_requests_total"), 0);
  EXPECT_EQ(Metric(m0, "moe_expertd_budget_bytes"), double(8 * kRec));
  EXPECT_EQ(Metric(m0, "moe_expertd_slabs_ready"), 0);
  // Work: 3 misses of layer 1, a shm hit, a look-ahead hint, 10 more misses (evictions).
  auto c = ExpertdClient::Connect(sock_);
  ASSERT_TRUE(c.ok());
  auto got = (*c)->Acquire(1, {0, 1, 2});
  for (auto& g : got) {
    ASSERT_TRUE(g.ok());
    (*c)->Release(*g);
  }
  auto hit = (*c)->TryLease(1, 0);
  ASSERT_TRUE(hit);
  (*c)->Release(*hit);
  ASSERT_TRUE((*c)->Hint(1, {1}, /*lookahead=*/true).ok());  // resident: kept, not read
  ASSERT_TRUE((*c)->Hint(2, {5}, /*lookahead=*/true).ok());
  for (int e = 3; e < 13; ++e) {
    auto r = (*c)->Acquire(0, {e});
    ASSERT_TRUE(r[0].ok());
    (*c)->Release(*r[0]);
  }
  std::string m1;
  for (int i = 0; i < 50; ++i) {  // shm hits are harvested every ~100 ms
    m1 = Scrape(port);
    if (Metric(m1, "moe_expertd_shm_hits_total") >= 1) break;
    usleep(20000);
  }
  EXPECT_EQ(Metric(m1, "moe_expertd_requests_total"), 13);
  EXPECT_GE(Metric(m1, "moe_expertd_shm_hits_total"), 1);
  EXPECT_GE(Metric(m1, "moe_expertd_tier_hits_total{tier=\"disk\"}"), 13);
  EXPECT_GE(Metric(m1, "moe_expertd_tier_bytes_total{tier=\"disk\"}"), 13.0 * kRec);
  EXPECT_EQ(Metric(m1, "moe_expertd_prefetch_issued_total"), 1);
  EXPECT_EQ(Metric(m1, "moe_expertd_lookahead_kept_total"), 1);
  EXPECT_GT(Metric(m1, "moe_expertd_evictions_total"), 0);
  EXPECT_EQ(Metric(m1, "moe_expertd_sessions"), 1);
  EXPECT_EQ(Metric(m1, "moe_expertd_slabs_ready"), 8);
}

}  // namespace
}  // namespace moe::expertd
