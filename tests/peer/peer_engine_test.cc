// Expert parallelism over real gRPC on 127.0.0.1: host A's engine sends the
// experts host B owns to B's PeerService and combines what comes back. The
// outputs must be bit-identical to A alone, whatever the map; every failure
// (wrong token, epoch, model bytes, a dead or slow peer) must fall back to
// A's own expert source with the same bits.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/model/engine.h"
#include "services/inferd/engine_identity.h"
#include "services/peer/peer_client.h"
#include "services/peer/peer_flags.h"
#include "services/peer/peer_server.h"
#include "services/peer/peer_tls.h"
#include "services/peer/wire.h"

namespace moe::peer {
namespace {

const std::string kModel = std::string(MOE_SOURCE_DIR) + "/models/glm-tiny-chat-q4";
const std::string kToken = "0123456789abcdef-test-token";

struct Host {
  std::unique_ptr<Engine> engine;
  std::string identity, weights;
};

Host OpenHost() {
  Host h;
  auto e = Engine::Open(kModel, EngineConfig{});
  EXPECT_TRUE(e.ok()) << e.status();
  h.engine = std::move(*e);
  h.weights = *inferd::WeightsIdentity(kModel);
  auto id = inferd::EngineStateIdentity(kModel, h.weights, EngineConfig{}, *h.engine);
  EXPECT_TRUE(id.ok()) << id.status();
  h.identity = *id;
  return h;
}

std::function<uint32_t(int, int)> Crcs(const Engine& e) {
  const Container* c = e.container();
  return [c](int l, int x) { return c->FindExpert(l, x)->crc; };
}

std::unique_ptr<PeerNode> Serve(Host& h, uint64_t epoch = 1, int64_t max_rows = 8192, PeerTls tls = {}) {
  PeerServerOptions so;
  so.tls = std::move(tls);
  so.token = kToken;
  so.model_identity = h.identity;
  so.epoch = epoch;
  so.max_rows_in_flight = max_rows;
  so.record_crc = Crcs(*h.engine);
  auto n = PeerNode::Start(&h.engine->model(), nullptr, "127.0.0.1:0", so);
  EXPECT_TRUE(n.ok()) << n.status();
  return std::move(*n);
}

OwnershipMap Map(const Host& h, std::vector<std::string> hosts, double replicate = 0.0, uint64_t epoch = 1) {
  return BalancedOwnership(hosts, MoeLayers(h.engine->config()), h.engine->config().n_routed_experts, {}, replicate,
                           epoch, h.weights);
}

std::unique_ptr<PeerClient> Client(const Host& h, OwnershipMap map, std::string token = kToken,
                                   std::chrono::milliseconds deadline = std::chrono::milliseconds(5000)) {
  PeerClientOptions co;
  co.self = 0;
  co.token = std::move(token);
  co.model_identity = h.identity;
  co.deadline = deadline;
  co.per_expert = std::chrono::milliseconds(0);
  co.suspect_for = std::chrono::milliseconds(0);  // every call tries again: each test counts its failures
  co.record_crc = Crcs(*h.engine);
  auto c = PeerClient::Create(std::move(map), co);
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(*c);
}

std::string Addr(int port) { return "127.0.0.1:" + std::to_string(port); }

// 48 ids of the demo vocabulary: a prefill-sized batch (many rows per expert).
std::vector<int32_t> Ids() {
  std::vector<int32_t> v;
  for (int i = 0; i < 48; ++i) v.push_back((i * 37 + 11) % 500 + 3);
  return v;
}

struct Outputs {
  std::vector<ScoreRow> score;
  std::vector<int32_t> tokens;
};

Outputs RunModel(Host& h) {
  Outputs o;
  auto s = h.engine->Score(Ids());
  EXPECT_TRUE(s.ok()) << s.status();
  if (s.ok()) o.score = *s;
  KvCache cache = h.engine->NewCache();
  const std::vector<int32_t> ids = Ids();
  auto g = h.engine->Generate(std::span(ids).first(8), 12, SamplingParams{}, cache);
  EXPECT_TRUE(g.ok()) << g.status();
  if (g.ok()) o.tokens = g->tokens;
  return o;
}

void ExpectSame(const Outputs& a, const Outputs& b, const std::string& what) {
  ASSERT_EQ(a.score.size(), b.score.size()) << what;
  for (size_t i = 0; i < a.score.size(); ++i) {
    EXPECT_EQ(a.score[i].argmax, b.score[i].argmax) << what << " row " << i;
    EXPECT_EQ(a.score[i].argmax_logprob, b.score[i].argmax_logprob) << what << " row " << i;  // bitwise
    EXPECT_EQ(a.score[i].next_logprob, b.score[i].next_logprob) << what << " row " << i;
  }
  EXPECT_EQ(a.tokens, b.tokens) << what;
}

class PeerEngine : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    a_ = new Host(OpenHost());
    ref_ = new Outputs(RunModel(*a_));
    b_ = new Host(OpenHost());
  }
  static void TearDownTestSuite() {
    delete a_;
    delete b_;
    delete ref_;
  }
  void TearDown() override { a_->engine->mutable_model().set_remote_experts(nullptr); }
  static Host* a_;
  static Host* b_;
  static Outputs* ref_;
};
Host* PeerEngine::a_ = nullptr;
Host* PeerEngine::b_ = nullptr;
Outputs* PeerEngine::ref_ = nullptr;

TEST_F(PeerEngine, TwoAndThreeHostsAreBitIdenticalToOne) {
  auto nb = Serve(*b_);
  Host c = OpenHost();
  auto nc = Serve(c);
  for (double replicate : {0.0, 0.25}) {
    for (int hosts : {2, 3}) {
      std::vector<std::string> addrs = {"127.0.0.1:1", Addr(nb->port())};
      if (hosts == 3) addrs.push_back(Addr(nc->port()));
      auto client = Client(*a_, Map(*a_, addrs, replicate));
      a_->engine->mutable_model().set_remote_experts(client.get());
      const Outputs got = RunModel(*a_);
      a_->engine->mutable_model().set_remote_experts(nullptr);
      ExpectSame(*ref_, got, absl::StrCat(hosts, " hosts, replicate ", replicate));
      const PeerClientStats st = client->stats();
      EXPECT_GT(st.remote_jobs, 0);
      EXPECT_EQ(st.fallback_jobs, 0);
      EXPECT_EQ(st.failed_calls, 0);
      EXPECT_GT(st.bytes_sent, 0);
      EXPECT_GT(st.bytes_received, 0);
    }
  }
  EXPECT_GT(nb->service()->stats().jobs, 0);
  EXPECT_GT(nc->service()->stats().jobs, 0);
  EXPECT_EQ(nb->service()->stats().refused, 0);
}

TEST_F(PeerEngine, RefusedCallsFallBackToThisHostWithTheSameBits) {
  auto nb = Serve(*b_, /*epoch=*/1);
  const std::vector<std::string> addrs = {"127.0.0.1:1", Addr(nb->port())};
  struct Case {
    const char* what;
    std::unique_ptr<PeerClient> client;
  };
  std::vector<Case> cases;
  cases.push_back({"wrong token", Client(*a_, Map(*a_, addrs), "not-the-group-token-at-all")});
  cases.push_back({"other epoch", Client(*a_, Map(*a_, addrs, 0.0, /*epoch=*/2))});
  for (Case& c : cases) {
    const int64_t refused0 = nb->service()->stats().refused;
    a_->engine->mutable_model().set_remote_experts(c.client.get());
    const Outputs got = RunModel(*a_);
    a_->engine->mutable_model().set_remote_experts(nullptr);
    ExpectSame(*ref_, got, c.what);
    const PeerClientStats st = c.client->stats();
    EXPECT_GT(st.failed_calls, 0) << c.what;
    EXPECT_EQ(st.fallback_jobs, st.remote_jobs) << c.what;
    EXPECT_GT(nb->service()->stats().refused, refused0) << c.what;
    EXPECT_EQ(nb->service()->stats().jobs, 0) << c.what;
  }
}

TEST_F(PeerEngine, DeadPeerFallsBackAndIsSuspectedAfterOneFailure) {
  int port = 0;
  {
    auto nb = Serve(*b_);
    port = nb->port();
  }  // stopped: nothing listens there now
  PeerClientOptions co;
  co.token = kToken;
  co.model_identity = a_->identity;
  co.deadline = std::chrono::milliseconds(2000);
  co.suspect_for = std::chrono::milliseconds(60000);
  auto client = PeerClient::Create(Map(*a_, {"127.0.0.1:1", Addr(port)}), co);
  ASSERT_TRUE(client.ok());
  a_->engine->mutable_model().set_remote_experts(client->get());
  const auto t0 = std::chrono::steady_clock::now();
  const Outputs got = RunModel(*a_);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  a_->engine->mutable_model().set_remote_experts(nullptr);
  ExpectSame(*ref_, got, "dead peer");
  const PeerClientStats st = (*client)->stats();
  // The first call fails; then the host is suspect and no later step waits on it.
  EXPECT_EQ(st.failed_calls, 1);
  EXPECT_EQ(st.calls, 1);
  EXPECT_LT(s, 30.0);
  bool any_remote = false;
  for (int e = 0; e < a_->engine->config().n_routed_experts; ++e) any_remote |= (*client)->Place(1, e, 1) != RemoteExperts::Placement::kLocal;
  EXPECT_FALSE(any_remote);
}

TEST_F(PeerEngine, RowsThatOutweighTheRecordReadItHere) {
  PeerClientOptions co;
  co.token = kToken;
  co.model_identity = a_->identity;
  co.record_bytes = [](int, int) { return int64_t{4096}; };
  co.row_wire_bytes = 1024;
  auto client = PeerClient::Create(Map(*a_, {"127.0.0.1:1", "127.0.0.1:2"}), co);
  ASSERT_TRUE(client.ok());
  const int layer = a_->engine->config().first_k_dense_replace;
  using P = RemoteExperts::Placement;
  EXPECT_EQ((*client)->Place(layer, 1, 4), P::kRemote);  // expert 1 is host 1's; 4 KB of rows = the record
  EXPECT_EQ((*client)->Place(layer, 1, 5), P::kLocal);   // 5 KB of rows: read the 4 KB record here
  EXPECT_EQ((*client)->Place(layer, 0, 1), P::kLocal);   // this host's own
  co.record_bytes = [](int, int) { return int64_t{0}; };  // unknown size: always send
  auto unknown = PeerClient::Create(Map(*a_, {"127.0.0.1:1", "127.0.0.1:2"}), co);
  EXPECT_EQ((*unknown)->Place(layer, 1, 1000000), P::kRemote);
  co.record_bytes = [](int, int) { return int64_t{4096}; };
  co.fetch_weights = true;  // the group moves weights over the network instead of reading them here
  auto fetching = PeerClient::Create(Map(*a_, {"127.0.0.1:1", "127.0.0.1:2"}), co);
  EXPECT_EQ((*fetching)->Place(layer, 1, 5), P::kFetch);
  EXPECT_EQ((*fetching)->Place(layer, 1, 4), P::kRemote);
}

TEST_F(PeerEngine, FetchedWeightsAreBitIdenticalAndForeignOnesFallBack) {
  auto nb = Serve(*b_);
  for (bool foreign : {false, true}) {
    PeerClientOptions co;
    co.token = kToken;
    co.model_identity = a_->identity;
    co.suspect_for = std::chrono::milliseconds(0);
    co.per_expert = std::chrono::milliseconds(0);
    const auto crcs = Crcs(*a_->engine);
    co.record_crc = [crcs, foreign](int l, int x) { return crcs(l, x) ^ (foreign ? 1u : 0u); };
    co.record_bytes = [](int, int) { return int64_t{1}; };  // every expert's rows outweigh its "record"
    co.row_wire_bytes = 4;
    co.fetch_weights = true;
    auto client = PeerClient::Create(Map(*a_, {"127.0.0.1:1", Addr(nb->port())}), co);
    ASSERT_TRUE(client.ok());
    a_->engine->mutable_model().set_remote_experts(client->get());
    const Outputs got = RunModel(*a_);
    a_->engine->mutable_model().set_remote_experts(nullptr);
    ExpectSame(*ref_, got, foreign ? "foreign fetched weights" : "fetched weights");
    const PeerClientStats st = (*client)->stats();
    EXPECT_EQ(st.remote_jobs, 0);
    if (foreign) {
      EXPECT_EQ(st.fetched_experts, 0);
      EXPECT_GT(st.fetch_failures, 0);
    } else {
      EXPECT_GT(st.fetched_experts, 0);
      EXPECT_EQ(st.fetch_failures, 0);
      EXPECT_GT(st.fetched_bytes, 0);
    }
  }
  EXPECT_GT(nb->service()->stats().fetches, 0);
}

// tests/data/peer_tls: a CA, host.pem/key signed by it (SAN 127.0.0.1), other.pem/key signed by another CA.
PeerTls TestTls(const std::string& name) {
  const std::string dir = std::string(MOE_SOURCE_DIR) + "/tests/data/peer_tls/";
  const std::string key = ::testing::TempDir() + "/peer_tls_" + name + ".key";  // a checkout's 0644 -> 0600
  std::filesystem::copy_file(dir + name + ".key", key, std::filesystem::copy_options::overwrite_existing);
  ::chmod(key.c_str(), 0600);
  auto t = LoadPeerTls(dir + name + ".pem", key, dir + "ca.pem");
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

TEST_F(PeerEngine, MutualTlsAdmitsTheGroupsCertificatesOnly) {
  auto nb = Serve(*b_, 1, 8192, TestTls("host"));
  struct Case {
    const char* what;
    PeerTls tls;
    bool admitted;
  };
  std::vector<Case> cases = {{"the group's certificate", TestTls("host"), true},
                             {"plaintext to an mTLS port", PeerTls{}, false},
                             {"a certificate of another CA", TestTls("other"), false}};
  for (Case& c : cases) {
    PeerClientOptions co;
    co.token = kToken;
    co.model_identity = a_->identity;
    co.deadline = std::chrono::milliseconds(5000);
    co.suspect_for = std::chrono::milliseconds(0);
    co.record_crc = Crcs(*a_->engine);
    co.tls = c.tls;
    auto client = PeerClient::Create(Map(*a_, {"127.0.0.1:1", Addr(nb->port())}), co);
    ASSERT_TRUE(client.ok());
    a_->engine->mutable_model().set_remote_experts(client->get());
    const Outputs got = RunModel(*a_);
    a_->engine->mutable_model().set_remote_experts(nullptr);
    ExpectSame(*ref_, got, c.what);
    const PeerClientStats st = (*client)->stats();
    EXPECT_GT(st.remote_jobs, 0) << c.what;
    if (c.admitted) {
      EXPECT_EQ(st.failed_calls, 0) << c.what;
    } else {
      EXPECT_GT(st.failed_calls, 0) << c.what;
      EXPECT_EQ(st.fallback_jobs, st.remote_jobs) << c.what;
    }
  }
}

TEST(PeerTlsFlags, AllOrNoneAPrivateKeyAndPem) {
  const std::string dir = std::string(MOE_SOURCE_DIR) + "/tests/data/peer_tls/";
  EXPECT_FALSE(LoadPeerTls("", "", "").value().enabled());
  EXPECT_NE(LoadPeerTls(dir + "host.pem", "", dir + "ca.pem").status().message().find("all or none"),
            std::string::npos);
  const std::string open_key = ::testing::TempDir() + "/peer_tls_open.key";
  std::filesystem::copy_file(dir + "host.key", open_key, std::filesystem::copy_options::overwrite_existing);
  ::chmod(open_key.c_str(), 0644);
  EXPECT_NE(LoadPeerTls(dir + "host.pem", open_key, dir + "ca.pem").status().message().find("chmod 600"),
            std::string::npos);
  ::chmod(open_key.c_str(), 0600);
  EXPECT_NE(LoadPeerTls(dir + "host.pem", open_key, kModel + "/config.json").status().message().find("not a PEM"),
            std::string::npos);
  EXPECT_TRUE(LoadPeerTls(dir + "host.pem", open_key, dir + "ca.pem").ok());
}

// A peer that answers late, or with another model's bytes.
class FaultyPeer final : public ExpertPeer::Service {
 public:
  FaultyPeer(PeerService* real, int delay_ms, bool bad_crc) : real_(real), delay_ms_(delay_ms), bad_crc_(bad_crc) {}
  grpc::Status RunExperts(grpc::ServerContext* ctx, const RunExpertsRequest* req, RunExpertsReply* reply) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
    grpc::Status s = real_->RunExperts(ctx, req, reply);
    if (bad_crc_) {
      for (auto& o : *reply->mutable_outputs()) o.set_record_crc(o.record_crc() ^ 1u);
    }
    return s;
  }

 private:
  PeerService* real_;
  int delay_ms_;
  bool bad_crc_;
};

TEST_F(PeerEngine, LateOrForeignRepliesFallBack) {
  PeerServerOptions so;
  so.token = kToken;
  so.model_identity = b_->identity;
  so.epoch = 1;
  so.record_crc = Crcs(*b_->engine);
  PeerService real(&b_->engine->model(), so);
  for (auto [delay, bad_crc, what] : {std::tuple{300, false, "late"}, std::tuple{0, true, "foreign record CRC"}}) {
    FaultyPeer faulty(&real, delay, bad_crc);
    int port = 0;
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&faulty);
    auto server = b.BuildAndStart();
    ASSERT_TRUE(server && port > 0);
    auto client = Client(*a_, Map(*a_, {"127.0.0.1:1", Addr(port)}), kToken, std::chrono::milliseconds(50));
    a_->engine->mutable_model().set_remote_experts(client.get());
    const Outputs got = RunModel(*a_);
    a_->engine->mutable_model().set_remote_experts(nullptr);
    ExpectSame(*ref_, got, what);
    const PeerClientStats st = client->stats();
    EXPECT_GT(st.failed_calls, 0) << what;
    EXPECT_EQ(st.fallback_jobs, st.remote_jobs) << what;
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  }
}

class PeerServiceChecks : public PeerEngine {
 protected:
  grpc::Status Call(const RunExpertsRequest& q, RunExpertsReply* r, const std::string& token = kToken) {
    auto stub = ExpertPeer::NewStub(grpc::CreateChannel(Addr(node_->port()), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return stub->RunExperts(&ctx, q, r);
  }
  RunExpertsRequest Good() {
    const ModelConfig& c = b_->engine->config();
    RunExpertsRequest q;
    q.set_model_identity(b_->identity);
    q.set_epoch(1);
    q.set_layer(c.first_k_dense_replace);
    q.set_hidden(static_cast<int32_t>(c.hidden_size));
    q.set_num_rows(2);
    std::vector<float> x(2 * c.hidden_size, 0.25f);
    EncodeRows(x.data(), x.size(), q.mutable_x_bf16(), q.mutable_x_f32());
    ExpertJob* j = q.add_jobs();
    j->set_expert(3);
    j->add_rows(0);
    j->add_rows(1);
    return q;
  }
  void SetUp() override { node_ = Serve(*b_, 1, /*max_rows=*/4); }
  std::unique_ptr<PeerNode> node_;
};

TEST_F(PeerServiceChecks, AnswersAGoodRequestAndRefusesBadOnesByName) {
  RunExpertsReply r;
  ASSERT_TRUE(Call(Good(), &r).ok());
  ASSERT_EQ(r.outputs_size(), 1);
  EXPECT_EQ(r.outputs(0).expert(), 3);
  EXPECT_NE(r.outputs(0).record_crc(), 0u);
  auto expect = [&](auto edit, grpc::StatusCode code, const std::string& needle, const std::string& token = kToken) {
    RunExpertsRequest q = Good();
    edit(q);
    RunExpertsReply rr;
    grpc::Status s = Call(q, &rr, token);
    EXPECT_EQ(s.error_code(), code) << needle << ": " << s.error_message();
    EXPECT_NE(s.error_message().find(needle), std::string::npos) << s.error_message();
  };
  auto none = [](RunExpertsRequest&) {};
  expect(none, grpc::StatusCode::UNAUTHENTICATED, "bearer token", "");
  expect(none, grpc::StatusCode::UNAUTHENTICATED, "bearer token", "wrong-token-wrong-token-wrong");
  expect([](auto& q) { q.set_model_identity("other"); }, grpc::StatusCode::FAILED_PRECONDITION, "the request is for 'other'");
  expect([](auto& q) { q.set_epoch(7); }, grpc::StatusCode::FAILED_PRECONDITION, "epoch 1, the request's 7");
  expect([](auto& q) { q.set_hidden(5); }, grpc::StatusCode::INVALID_ARGUMENT, "hidden 5");
  expect([](auto& q) { q.set_num_rows(3); }, grpc::StatusCode::INVALID_ARGUMENT, "bytes of bf16");
  expect([](auto& q) { q.set_x_f32("abcd"); }, grpc::StatusCode::INVALID_ARGUMENT, "exactly one");
  expect([](auto& q) { q.mutable_jobs(0)->add_rows(9); }, grpc::StatusCode::INVALID_ARGUMENT, "row 9");
  expect([](auto& q) { q.mutable_jobs(0)->set_expert(100000); }, grpc::StatusCode::INVALID_ARGUMENT, "expert 100000");
  expect([](auto& q) { q.set_layer(0); }, grpc::StatusCode::INVALID_ARGUMENT, "layer 0 has no routed experts");
  expect([](auto& q) { q.clear_jobs(); }, grpc::StatusCode::INVALID_ARGUMENT, "no jobs");
  expect([](auto& q) { *q.add_jobs() = q.jobs(0); }, grpc::StatusCode::INVALID_ARGUMENT, "expert 3 asked twice");
  // The bound (4 pairs in flight) refuses a call that alone exceeds it.
  expect(
      [](auto& q) {
        for (int e = 4; e < 6; ++e) {
          ExpertJob* j = q.add_jobs();
          j->set_expert(e);
          j->add_rows(0);
          j->add_rows(1);
        }
      },
      grpc::StatusCode::RESOURCE_EXHAUSTED, "would exceed 4 in flight");
}

TEST_F(PeerServiceChecks, FetchExpertStreamsAnExpertAndRefusesBadOnesByName) {
  auto stub = ExpertPeer::NewStub(grpc::CreateChannel(Addr(node_->port()), grpc::InsecureChannelCredentials()));
  const int layer = b_->engine->config().first_k_dense_replace;
  auto fetch = [&](int l, int e, const std::string& token, int64_t* bytes) {
    FetchExpertRequest q;
    q.set_model_identity(b_->identity);
    q.set_epoch(1);
    q.set_layer(l);
    q.set_expert(e);
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto reader = stub->FetchExpert(&ctx, q);
    ExpertChunk c;
    *bytes = 0;
    while (reader->Read(&c)) *bytes += static_cast<int64_t>(c.data().size());
    return reader->Finish();
  };
  int64_t bytes = 0;
  ASSERT_TRUE(fetch(layer, 3, kToken, &bytes).ok());
  EXPECT_GT(bytes, 0);
  for (auto [l, e, token, code, needle] :
       {std::tuple{layer, 3, std::string(), grpc::StatusCode::UNAUTHENTICATED, "bearer token"},
        std::tuple{0, 3, kToken, grpc::StatusCode::INVALID_ARGUMENT, "layer 0 has no routed experts"},
        std::tuple{layer, 100000, kToken, grpc::StatusCode::INVALID_ARGUMENT, "expert 100000 out of range"}}) {
    grpc::Status s = fetch(l, e, token, &bytes);
    EXPECT_EQ(s.error_code(), code) << needle << ": " << s.error_message();
    EXPECT_NE(s.error_message().find(needle), std::string::npos) << s.error_message();
    EXPECT_EQ(bytes, 0);
  }
}

TEST(PeerFlags, AFlagWithoutExpertParallelismIsRefusedByName) {
  PeerFlags f;
  EXPECT_TRUE(f.CheckUnused().ok());
  f.host_index = 1;
  EXPECT_NE(f.CheckUnused().message().find("--host-index acts only with --ownership-map"), std::string::npos);
  f = PeerFlags{};
  f.tls_ca = "ca.pem";
  EXPECT_NE(f.CheckUnused().message().find("--peer-tls-ca"), std::string::npos);
  f = PeerFlags{};
  f.fetch_weights = true;
  EXPECT_NE(f.CheckUnused().message().find("--peer-fetch-weights"), std::string::npos);
  f.map_file = "map.json";  // on: StartPeerNode checks the rest
  EXPECT_TRUE(f.CheckUnused().ok());
}

TEST(PeerFlags, TokenFileMustBePrivateAndLong) {
  const std::string dir = ::testing::TempDir() + "/peer_token";
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text, mode_t mode) {
    const std::string p = dir + "/" + name;
    std::ofstream(p) << text;
    ::chmod(p.c_str(), mode);
    return p;
  };
  EXPECT_EQ(*ReadTokenFile(write("ok", "  0123456789abcdef\n", 0600)), "0123456789abcdef");
  EXPECT_NE(ReadTokenFile(write("open", "0123456789abcdef", 0644)).status().message().find("chmod 600"),
            std::string::npos);
  EXPECT_NE(ReadTokenFile(write("short", "abc", 0600)).status().message().find("shorter than 16"), std::string::npos);
  EXPECT_FALSE(ReadTokenFile(dir + "/missing").ok());
}

}  // namespace
}  // namespace moe::peer
