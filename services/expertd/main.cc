// expertd: the per-host expert cache service. Flags and wiring only; the
// logic lives in common/expertstore (ExpertStore) and ExpertdService.
//
//   expertd --model CONTAINER_DIR | --manifest FILE  --socket /run/moe/expertd.sock
//           --budget 12G | --plan PLAN.json  [--top-k K] [--queue-depth 8] [--io auto|uring|pread]
//           [--heat-file FILE] [--metrics-addr 127.0.0.1:9464]
//
// Listens only on a unix socket (gRPC) plus SOCKET.session (fd passing and
// worker liveness). SIGTERM/SIGINT: stop accepting, finish in-flight calls
// (2 s grace), save heat, exit 0.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <cstdio>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "common/base/flags.h"
#include "common/base/service_main.h"
#include "common/base/log.h"
#include "common/base/status.h"
#include "common/expertstore/container_locator.h"
#include "common/expertstore/record_locator.h"
#include "common/expertstore/store.h"
#include "common/format/model_config.h"
#include "common/format/serving_plan.h"
#include "services/expertd/expertd_service.h"
#include "services/expertd/metrics.h"
#include "services/expertd/session_channel.h"

namespace {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "expertd: %s\n", std::string(s.message()).c_str());
  return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

int Main(int argc, char** argv) {
  using namespace moe;
  std::string model_dir, manifest, socket_path, io_kind = "auto", heat_file, metrics_addr, policy = "heat", plan_file;
  uint64_t budget = 0, chunk = 2ull << 20;
  int64_t top_k = 8, qd = 8, max_sessions = 16, wait_ms = 10000, spec_inflight = 1;
  bool page_cache = true, populate = false, register_buffers = true, prefetch_gate = true, huge_pages = false;
  bool weigh_admission = false;
  FlagSet flags("expertd", "Serve routed experts from a shared-memory cache to inference workers.");
  flags.AddString("model", &model_dir, "moestream container directory (moe convert output)");
  flags.AddString("manifest", &manifest, "or: a text manifest of expert records (tests, synthetic models)");
  flags.AddString("socket", &socket_path, "unix socket path for gRPC (SOCKET.session is used too)");
  flags.AddBytes("budget", &budget, "bytes of shared memory for expert slabs (sized once at start)");
  flags.AddString("plan", &plan_file,
                  "a serving plan of --model (moe plan --expertd ... --out FILE): its expert cache is the budget, its "
                  "top-k and workers set --top-k and the sessions it needs");
  flags.AddInt("top-k", &top_k,
               "experts per layer per token; the budget must hold one layer's top-k (default: --model's "
               "num_experts_per_tok, else 8)");
  flags.AddInt("queue-depth", &qd, "reads in flight");
  flags.AddBytes("chunk", &chunk, "bytes per read request (records are split into chunks)");
  flags.AddInt("spec-inflight", &spec_inflight,
               "look-ahead (speculative) read chunks in flight at once, sent only while no demand read is queued "
               "(0 = no cap)");
  flags.AddBool("prefetch-gate", &prefetch_gate,
                "read look-ahead hints only while their precision beats the share of time fetches wait");
  flags.AddBool("prefetch-weigh-admission", &weigh_admission,
                "a look-ahead fill evicts only a key worth less than the prediction's measured precision makes it");
  flags.AddString("io", &io_kind, "io engine: auto (io_uring, else pread), uring, pread");
  flags.AddBool("register-buffers", &register_buffers, "register slabs as io_uring fixed buffers");
  flags.AddBool("page-cache", &page_cache, "serve records already in the OS page cache without disk reads");
  flags.AddBool("populate", &populate, "pre-fault the arena at start");
  flags.AddBool("huge-pages", &huge_pages,
                "arena on 2 MiB hugetlb pages (root reserves them: /proc/sys/vm/nr_hugepages); refused if too few");
  flags.AddInt("max-sessions", &max_sessions, "worker sessions");
  flags.AddInt("wait-ms", &wait_ms, "how long a fetch waits for a slab when all are leased");
  flags.AddString("policy", &policy, "eviction order: heat (decayed count + recency, default) or learned (online model; see policy.h)");
  flags.AddString("heat-file", &heat_file, "persist heat here (loaded at start, saved at exit)");
  flags.AddString("metrics-addr", &metrics_addr, "Prometheus /metrics address, e.g. 127.0.0.1:9464 (off if empty)");
  if (auto code = ParseServiceFlags("expertd", flags, argc, argv)) return *code;
  if (manifest.empty() == model_dir.empty())
    return Fail(absl::InvalidArgumentError("give exactly one of --model DIR or --manifest FILE"));
  if (socket_path.empty()) return Fail(absl::InvalidArgumentError("--socket is required (a unix socket path)"));
  if (!plan_file.empty()) {
    if (model_dir.empty()) return Fail(absl::InvalidArgumentError("--plan needs --model (the container it plans)"));
    for (const char* f : {"budget", "top-k"})
      if (flags.WasSet(f)) return Fail(absl::InvalidArgumentError(absl::StrCat("give --plan or --", f, ", not both")));
    auto plan = LoadServingPlan(plan_file);
    if (!plan.ok()) return Fail(plan.status());
    if (auto s = CheckPlanMatchesModel(*plan, model_dir); !s.ok()) return Fail(Annotate(s, "--plan"));
    if (!plan->expertd)
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "--plan ", plan_file, " keeps routed experts in each worker (made without --expertd): it has no cache for expertd")));
    budget = static_cast<uint64_t>(plan->expert_cache_bytes);
    top_k = plan->top_k;
    if (max_sessions < plan->workers)
      return Fail(absl::InvalidArgumentError(absl::StrCat("--max-sessions ", max_sessions, " is below the plan's ",
                                                          plan->workers, " workers")));
    MOE_LOG(INFO) << "expertd: serving plan " << plan_file << ": expert cache " << budget << " B, top-" << top_k
                  << ", " << plan->workers << " worker(s)";
  }
  if (plan_file.empty() && !model_dir.empty() && !flags.WasSet("top-k")) {
    // The model's own top-k: a fixed 8 refused budgets that hold a top-4 model's working set.
    auto config = LoadModelConfig(model_dir);
    if (!config.ok()) return Fail(Annotate(config.status(), "--model"));
    if (config->num_experts_per_tok > 0) top_k = config->num_experts_per_tok;
  }
  if (budget == 0) return Fail(absl::InvalidArgumentError("--budget is required (e.g. --budget 12G), or --plan"));
  if (top_k < 1 || max_sessions < 1 || max_sessions > 4096)
    return Fail(absl::InvalidArgumentError("--top-k / --max-sessions out of range"));
  if (spec_inflight < 0 || spec_inflight > 4096)
    return Fail(absl::InvalidArgumentError("--spec-inflight must be in [0, 4096] (0 = no cap)"));
  if (policy != "learned" && policy != "heat")
    return Fail(absl::InvalidArgumentError(absl::StrCat("--policy: '", policy, "' is not one of learned, heat")));

  // Block the stop signals before any thread starts; main waits for them.
  sigset_t stop = BlockStopSignals();

  absl::StatusOr<std::unique_ptr<expertstore::RecordLocator>> locator;
  if (!model_dir.empty()) {
    auto c = expertstore::ContainerLocator::Open(model_dir);
    if (!c.ok()) return Fail(c.status());
    locator = std::unique_ptr<expertstore::RecordLocator>(std::move(*c));
  } else {
    auto m = expertstore::ManifestLocator::Load(manifest);
    if (!m.ok()) return Fail(m.status());
    locator = std::unique_ptr<expertstore::RecordLocator>(std::move(*m));
  }
  expertstore::StoreConfig cfg;
  cfg.budget_bytes = budget;
  cfg.top_k = static_cast<uint32_t>(top_k);
  cfg.max_sessions = static_cast<uint32_t>(max_sessions);
  cfg.io.queue_depth = static_cast<int>(qd);
  cfg.io.chunk_bytes = chunk;
  cfg.io.max_speculative_inflight = static_cast<int>(spec_inflight);
  cfg.prefetch_gate.enabled = prefetch_gate;
  cfg.prefetch_gate.weigh_admission = weigh_admission;
  cfg.io.register_buffers = register_buffers;
  auto kind = expertstore::ParseIoKind(io_kind);
  if (!kind.ok()) return Fail(kind.status());
  cfg.io.kind = *kind;
  cfg.page_cache_tier = page_cache;
  cfg.populate = populate;
  cfg.huge_pages = huge_pages;
  cfg.heat_file = heat_file;
  cfg.policy.learned = policy == "learned";
  cfg.wait_ms = wait_ms;
  auto store = expertstore::ExpertStore::Create(std::move(*locator), cfg);
  if (!store.ok()) return Fail(store.status());

  expertd::SessionChannel channel(store->get(), socket_path + ".session");
  if (auto s = channel.Start(); !s.ok()) return Fail(s);
  std::unique_ptr<expertd::MetricsExporter> metrics;
  if (!metrics_addr.empty()) {
    auto m = expertd::MetricsExporter::Start(store->get(), metrics_addr);
    if (!m.ok()) return Fail(m.status());
    metrics = std::move(*m);
    // The bound port (useful with :0, which picks a free one).
    MOE_LOG(INFO) << "metrics on http://" << metrics_addr.substr(0, metrics_addr.rfind(':')) << ":"
                  << metrics->port() << "/metrics";
  }
  expertd::ExpertdService service(store->get(), &channel);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket_path, grpc::InsecureServerCredentials());
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.SetMaxSendMessageSize(64 << 20);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) return Fail(absl::UnavailableError("cannot listen on unix:" + socket_path));
  MOE_LOG(INFO) << "expertd serving on unix:" << socket_path;
  std::printf("expertd ready %s\n", socket_path.c_str());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&stop, &sig);
  MOE_LOG(INFO) << "signal " << sig << ": shutting down";
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  channel.Stop();
  metrics.reset();
  if (auto s = (*store)->SaveHeat(); !s.ok()) {
    MOE_LOG(WARNING) << s.message();
  }
  store->reset();
  ::unlink(socket_path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Main(argc, argv); }
