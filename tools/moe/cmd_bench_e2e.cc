// moe bench e2e --slice DIR --expertd SOCK [--budgets 10,50,100]
//               [--tokens 24] [--warmup 8] [--lookahead-accuracy 0.72]
//               [--trace FILE | --zipf 0.9 --keep 0.35] [--dense-ms X] [--json]
// End-to-end expert path of a decode step through a running expertd, on a
// `moe synth` slice with GLM-5's expert dimensions. Per token and MoE layer:
// lease the layer's top-k experts and run each (fused gate/up SwiGLU + down,
// common/kernels, S = 1) as soon as its lease arrives, then release it
// (pipelined, as the engine does: ExpertdClient::AcquireEach hands over the
// shared-memory hits first while the one streaming FetchExperts reads the
// misses, then each miss as its read lands; --serial: the old path, the
// whole layer's batch first, then the compute). Prefetch on: before layer L's
// fetch the worker hints layer L+1's experts as a router look-ahead predicts
// them (each true expert kept with --lookahead-accuracy, else a wrong one:
// colibri measured ~72%), and at the last layer the current token's layer-0
// experts for the next token. Routing: a skewed synthetic trace (cache_sim.h)
// or a recorded one (routing_trace.h; layers / ids folded modulo the slice).
// --dense-ms X: after each layer's experts, X ms of real kernel work stand for
// the next layer's attention and router (which the engine runs between a
// look-ahead hint and the fetch it predicts): the time in which the disk is
// free for look-ahead reads. 0 (default): experts only.
//
// Budgets are set on the running expertd with the admin SetBudget RPC (start
// it with --budget >= the whole slice, --no-page-cache so misses are disk
// reads). Each (budget, prefetch) run decodes its own window of the trace
// (off first, then on; --prefetch-first swaps both the order and the windows,
// so repeats in both orders cancel a bias of the window or of the order):
// --warmup tokens untimed, then --tokens timed.
//
// Floors measured in the same run: raw O_DIRECT io_uring read GB/s of the
// slice's records (at start and end), and the compute time of one expert
// from RAM (8 distinct records, past the L3, median of 24), at start and end
// (the faster of each is used: the stricter floor). Floor time of a run =
// max(bytes it had to read / raw GB/s, expert uses x compute time + dense
// work): perfect overlap of reads and compute. "Had to read": the disk bytes
// expertd read less look-ahead reads nobody used. Reported: tokens/s, hit
// rate, read GB/s, tokens/s / floor tokens/s.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/aligned_buffer.h"
#include "common/base/flags.h"
#include "common/base/status.h"
#include "common/expertstore/cache_sim.h"
#include "common/expertstore/record_locator.h"
#include "common/kernels/kernels.h"
#include "nlohmann/json.hpp"
#include "services/expertd_client/client.h"
#include "tools/moe/bench_io.h"
#include "tools/moe/commands.h"

namespace moe::cli {
namespace {

using Clock = std::chrono::steady_clock;
double Secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

struct Slice {
  int64_t hidden = 0, inter = 0, layers = 0, experts = 0, top_k = 0;
  uint64_t record_bytes = 0;
  QFormat format = QFormat::kQ4G64;
  std::string manifest;
};

absl::StatusOr<Slice> LoadSlice(const std::string& dir) {
  std::ifstream in(dir + "/slice.json");
  if (!in) return absl::NotFoundError(absl::StrCat("--slice ", dir, ": no slice.json (write one with moe synth)"));
  auto j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || j.value("kind", "") != "moestream-synth-slice")
    return absl::InvalidArgumentError(absl::StrCat("--slice ", dir, "/slice.json: not a moe synth slice"));
  Slice s;
  s.hidden = j.value("hidden", 0);
  s.inter = j.value("moe_intermediate", 0);
  s.layers = j.value("layers", 0);
  s.experts = j.value("experts", 0);
  s.top_k = j.value("top_k", 0);
  s.record_bytes = j.value("record_bytes", uint64_t{0});
  auto f = QFormatFromName(j.value("format", std::string()));
  if (!f || s.hidden <= 0 || s.inter <= 0 || s.layers <= 0 || s.experts <= 0 || s.top_k <= 0)
    return absl::InvalidArgumentError(absl::StrCat("--slice ", dir, "/slice.json: bad shape fields"));
  s.format = *f;
  s.manifest = dir + "/" + j.value("manifest", std::string("slice.manifest"));
  return s;
}

// The three matrices of a record laid out by moe synth (parts: data, scales x 3).
struct ExpertView {
  kernels::QMatrix gate, up, down;
};
ExpertView View(const Slice& s, const uint8_t* rec, const uint64_t* parts) {
  auto m = [&](int i, int64_t rows, int64_t cols) {
    kernels::QMatrix q;
    q.format = s.format;
    q.rows = rows;
    q.cols = cols;
    q.data = rec + parts[2 * i];
    q.scales = reinterpret_cast<const float*>(rec + parts[2 * i + 1]);
    return q;
  };
  return {m(0, s.inter, s.hidden), m(1, s.inter, s.hidden), m(2, s.hidden, s.inter)};
}

struct Compute {
  const Slice* s;
  kernels::Kernels* k;
  std::vector<float> x, h, y;
  absl::Status Run(const ExpertView& v) {
    const float w = 0.125f;
    MOE_RETURN_IF_ERROR(k->GateUpSwiGLU(v.gate, v.up, x.data(), 1, h.data()));
    return k->DownAccumulate(v.down, h.data(), 1, &w, y.data());
  }
};

struct RunResult {
  int budget_pct = 0;
  bool prefetch = false;
  uint64_t budget_bytes = 0;
  int tokens = 0;
  double seconds = 0, tps = 0, hit_rate = 0, read_gbps = 0, floor_tps = 0, vs_floor = 0;
  double compute_s = 0, fetch_s = 0;  // timed tokens: in the kernels, waiting in FetchExperts
  double dense_s = 0;                 // timed tokens: the --dense-ms work
  uint64_t gets = 0, hits = 0, disk_bytes = 0, prefetch_issued = 0, prefetch_used = 0, prefetch_refused = 0;
  uint64_t needed_bytes = 0;  // disk_bytes less look-ahead reads nobody used
  uint64_t prefetch_promoted = 0, prefetch_gated = 0, lookahead_kept = 0;
  double precision = 0, demand_busy = 0;  // expertd's prefetch gate at the end of the run
};

uint64_t DiskBytes(const expertd::StatsReply& r) {
  uint64_t b = 0;
  for (const auto& t : r.tiers())
    if (t.tier() == "disk" || t.tier() == "pagecache") b += t.bytes();
  return b;
}

absl::Status DoBench(int argc, char** argv, bool* help) {
  std::string slice_dir, sock, budgets_s = "10,50,100", trace_path;
  int64_t tokens = 24, warmup = 8, seed = 1, qd = 8;
  uint64_t chunk = 2ull << 20;
  double accuracy = 0.72, zipf = 0.9, keep = 0.35, dense_ms = 0;
  bool json = false, prefetch_first = false, serial = false;
  FlagSet flags("e2e", "Decode the expert path of tokens through expertd on a moe synth slice.");
  flags.AddString("slice", &slice_dir, "moe synth output directory (slice.json)");
  flags.AddString("expertd", &sock, "unix socket of an expertd serving DIR/slice.manifest");
  flags.AddString("budgets", &budgets_s, "cache budgets, percent of the slice, comma-separated");
  flags.AddInt("tokens", &tokens, "timed tokens per run");
  flags.AddInt("warmup", &warmup, "untimed tokens before each run");
  flags.AddDouble("lookahead-accuracy", &accuracy, "share of the next layer's experts the look-ahead predicts");
  flags.AddString("trace", &trace_path, "routing trace (moe run --record-routing); default: synthetic skewed");
  flags.AddDouble("zipf", &zipf, "synthetic: Zipf exponent of expert popularity");
  flags.AddDouble("keep", &keep, "synthetic: chance to reuse each of the previous token's experts");
  flags.AddInt("seed", &seed, "synthetic trace and look-ahead seed");
  flags.AddInt("queue-depth", &qd, "raw floor: reads in flight (use expertd's --queue-depth)");
  flags.AddBytes("chunk", &chunk, "raw floor: bytes per read (use expertd's --chunk)");
  flags.AddDouble("dense-ms", &dense_ms,
                  "per MoE layer, this many ms of kernel work after its experts: the next layer's attention, "
                  "router and shared expert, which the engine runs before that layer's fetch (0: none)");
  flags.AddBool("json", &json, "print JSON");
  flags.AddBool("serial", &serial,
                "per layer, wait for all of its experts before computing any (the unpipelined path, for A/B)");
  flags.AddBool("prefetch-first", &prefetch_first, "per budget, run prefetch on before off (and on the earlier window)");
  MOE_RETURN_IF_ERROR(flags.Parse(argc, argv));
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    *help = true;
    return absl::OkStatus();
  }
  if (slice_dir.empty() || sock.empty()) return absl::InvalidArgumentError("--slice and --expertd are required");
  if (tokens < 1 || warmup < 0) return absl::InvalidArgumentError("--tokens must be >= 1, --warmup >= 0");
  if (!(accuracy >= 0 && accuracy <= 1)) return absl::InvalidArgumentError("--lookahead-accuracy must be in [0, 1]");
  if (!(dense_ms >= 0 && dense_ms <= 10000))
    return absl::InvalidArgumentError(absl::StrCat("--dense-ms must be in [0, 10000] (got ", dense_ms, ")"));
  std::vector<int> budgets;
  for (absl::string_view p : absl::StrSplit(AV(budgets_s), ',', absl::SkipEmpty())) {
    int v;
    if (!absl::SimpleAtoi(p, &v) || v < 1 || v > 100)
      return absl::InvalidArgumentError(absl::StrCat("--budgets: '", p, "' is not a percentage in [1, 100]"));
    budgets.push_back(v);
  }
  MOE_ASSIGN_OR_RETURN(Slice sl, LoadSlice(slice_dir));
  MOE_ASSIGN_OR_RETURN(auto loc, expertstore::ManifestLocator::Load(sl.manifest));
  MOE_ASSIGN_OR_RETURN(auto client, expertd::ExpertdClient::Connect(sock, "bench-e2e"));
  if (client->num_layers() != uint32_t(sl.layers) || client->num_experts() != uint32_t(sl.experts) ||
      client->model_id() != loc->model_id())
    return absl::FailedPreconditionError(absl::StrCat("expertd at ", sock, " serves '", client->model_id(),
                                                      "', not the slice '", loc->model_id(), "'"));
  MOE_ASSIGN_OR_RETURN(auto k, kernels::Kernels::Create(kernels::KernelConfig{}));
  Compute comp{&sl, k.get(), std::vector<float>(sl.hidden), std::vector<float>(sl.inter),
               std::vector<float>(sl.hidden)};
  std::mt19937_64 rng{static_cast<uint64_t>(seed)};
  std::normal_distribution<float> nd(0.f, 1.f);
  for (float& v : comp.x) v = nd(rng);

  // Floors: raw disk reads, and one expert's compute from RAM.
  MOE_ASSIGN_OR_RETURN(double raw0, RawRead(*loc, int(qd), chunk));
  // Compute floor: 8 distinct records in private memory (8 x 21 MB, past the
  // 32 MiB L3, as the arena's slabs are), round-robin; median per expert.
  std::vector<AlignedBuffer> recs;
  std::vector<ExpertView> views;
  {
    const int n = int(std::min<int64_t>(8, sl.layers * sl.experts));
    for (int i = 0; i < n; ++i) {
      auto li = loc->Locate(int(i / sl.experts), int(i % sl.experts));
      if (!li.ok()) return Annotate(li.status(), "slice manifest");
      const std::string& path = loc->files()[li->file];
      int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
      recs.emplace_back(AlignUp(li->length, 4096));
      const bool ok = ::pread(fd, recs.back().data(), li->length, off_t(li->offset)) == ssize_t(li->length);
      ::close(fd);
      if (!ok) return absl::DataLossError(absl::StrCat(path, ": cannot read record ", i));
      views.push_back(View(sl, recs.back().data(), li->part_offsets));
    }
  }
  auto compute_floor = [&]() -> absl::StatusOr<double> {
    const size_t n = views.size();
    std::vector<double> ts;
    for (size_t i = 0; i < 4 * n; ++i) {
      auto a = Clock::now();
      MOE_RETURN_IF_ERROR(comp.Run(views[i % n]));
      if (i >= n) ts.push_back(Secs(a, Clock::now()));
    }
    std::sort(ts.begin(), ts.end());
    return ts[ts.size() / 2];
  };
  MOE_ASSIGN_OR_RETURN(double t_expert0, compute_floor());

  const int runs = int(budgets.size()) * 2;
  const int per_run = int(warmup + tokens);
  expertstore::RoutingTrace trace;
  if (trace_path.empty()) {
    expertstore::SyntheticTraceConfig c;
    c.num_layers = uint32_t(sl.layers);
    c.num_experts = uint32_t(sl.experts);
    c.top_k = uint32_t(sl.top_k);
    c.num_tokens = uint32_t(runs * per_run);
    c.zipf_s = zipf;
    c.keep_prob = keep;
    c.seed = uint64_t(seed);
    trace = expertstore::MakeSyntheticTrace(c);
  } else {
    MOE_ASSIGN_OR_RETURN(trace, expertstore::LoadTrace(trace_path));
  }
  // routing[token][layer] = ids; a recorded trace is folded onto the slice.
  std::vector<std::vector<std::vector<int>>> routing;
  {
    size_t i = 0;
    const size_t per_row = trace.top_k;
    std::vector<std::vector<int>> tok;
    int last_layer = -1;
    std::vector<std::vector<int>> acc(sl.layers);
    int moe_rows = 0;
    while (i + per_row <= trace.keys.size()) {
      const int layer = int(trace.keys[i] / trace.num_experts);
      if (layer <= last_layer && moe_rows > 0) {
        routing.push_back(acc);
        acc.assign(sl.layers, {});
        moe_rows = 0;
      }
      last_layer = layer;
      auto& dst = acc[size_t(moe_rows % sl.layers)];
      if (int64_t(dst.size()) < sl.top_k) {
        for (size_t j = 0; j < per_row && int64_t(dst.size()) < sl.top_k; ++j) {
          int e = int(trace.keys[i + j] % trace.num_experts) % int(sl.experts);
          if (std::find(dst.begin(), dst.end(), e) == dst.end()) dst.push_back(e);
        }
      }
      ++moe_rows;
      i += per_row;
    }
    if (moe_rows > 0) routing.push_back(acc);
    for (auto& t : routing)
      for (auto& l : t)
        for (int e = 0; int64_t(l.size()) < sl.top_k && e < sl.experts; ++e)
          if (std::find(l.begin(), l.end(), e) == l.end()) l.push_back(e);
  }
  if (int(routing.size()) < runs * per_run)
    return absl::InvalidArgumentError(absl::StrCat("--trace has ", routing.size(), " tokens; ", runs * per_run,
                                                   " needed (", runs, " runs x (warmup + tokens))"));

  const uint64_t slab = AlignUp(sl.record_bytes, 4096);
  const uint64_t all_bytes = slab * uint64_t(sl.layers * sl.experts);
  std::vector<RunResult> results;
  std::uniform_real_distribution<double> u(0, 1);
  int window = 0;
  for (int pct : budgets) {
    for (bool prefetch : {prefetch_first, !prefetch_first}) {
      RunResult rr;
      rr.budget_pct = pct;
      rr.prefetch = prefetch;
      MOE_ASSIGN_OR_RETURN(rr.budget_bytes, client->SetBudget(all_bytes * uint64_t(pct) / 100));
      const int t0 = window++ * per_run;
      expertd::StatsReply before;
      Clock::time_point start;
      for (int t = t0; t < t0 + per_run; ++t) {
        if (t == t0 + warmup) {
          MOE_ASSIGN_OR_RETURN(before, client->Stats());
          start = Clock::now();
        }
        const bool timed = t >= t0 + warmup;
        for (int l = 0; l < sl.layers; ++l) {
          const auto& ids = routing[size_t(t)][size_t(l)];
          if (prefetch) {
            // Router look-ahead for layer l+1; at the last layer, "same as
            // this token" for layer 0 of the next token.
            const bool last = l + 1 == sl.layers;
            const auto& truth = last ? ids : routing[size_t(t)][size_t(l + 1)];
            std::vector<int> pred;
            if (last) {
              pred = routing[size_t(t)][0];
            } else {
              for (int e : truth) {
                int p = e;
                if (u(rng) >= accuracy) {
                  do p = int(rng() % uint64_t(sl.experts));
                  while (std::find(truth.begin(), truth.end(), p) != truth.end());
                }
                if (std::find(pred.begin(), pred.end(), p) == pred.end()) pred.push_back(p);
              }
            }
            // Both are predictions: speculative (admission-gated) at expertd.
            (void)client->Hint(last ? 0 : l + 1, pred, /*lookahead=*/true);
          }
          // Pipelined (default): each expert is computed as soon as its lease
          // arrives (shm hits first, while expertd reads the misses; then
          // each miss as its read lands) and released at once. --serial:
          // the whole layer's batch first, then the compute (the old path).
          absl::Status err;
          double in_kernels = 0;
          std::vector<expertstore::Lease> held;
          const auto tf = Clock::now();
          client->AcquireEach(l, ids, [&](size_t, absl::StatusOr<expertstore::Lease> ls, bool shm_hit) {
            if (timed) {
              rr.gets++;
              rr.hits += shm_hit ? 1 : 0;
            }
            if (!ls.ok()) {
              if (err.ok()) err = Annotate(ls.status(), "FetchExperts");
              return;
            }
            if (serial || !err.ok()) {
              held.push_back(*ls);
              return;
            }
            const auto tk = Clock::now();
            err = comp.Run(View(sl, ls->data, ls->part_offsets));
            in_kernels += Secs(tk, Clock::now());
            client->Release(*ls);
          });
          const auto tc = Clock::now();
          if (err.ok() && serial) {
            for (const auto& ls : held) {
              if (err = comp.Run(View(sl, ls.data, ls.part_offsets)); !err.ok()) break;
            }
            in_kernels += Secs(tc, Clock::now());
          }
          for (auto& ls : held) client->Release(ls);
          if (!err.ok()) return err;
          if (timed) {
            rr.compute_s += in_kernels;
            rr.fetch_s += Secs(tf, Clock::now()) - in_kernels;
          }
          // The dense part of the next layer: real kernel work (experts from
          // private RAM) for dense_ms, while expertd's reads run.
          if (dense_ms > 0) {
            const auto td = Clock::now();
            for (size_t i = 0; Secs(td, Clock::now()) * 1e3 < dense_ms; ++i)
              MOE_RETURN_IF_ERROR(comp.Run(views[i % views.size()]));
            if (timed) rr.dense_s += Secs(td, Clock::now());
          }
        }
      }
      rr.seconds = Secs(start, Clock::now());
      MOE_ASSIGN_OR_RETURN(auto after, client->Stats());
      rr.tokens = int(tokens);
      rr.tps = tokens / rr.seconds;
      rr.hit_rate = rr.gets ? double(rr.hits) / double(rr.gets) : 0;
      rr.disk_bytes = DiskBytes(after) - DiskBytes(before);
      rr.read_gbps = rr.disk_bytes / rr.seconds / 1e9;
      rr.prefetch_issued = after.prefetch_issued() - before.prefetch_issued();
      rr.prefetch_used = after.prefetch_used() - before.prefetch_used();
      rr.prefetch_refused = after.prefetch_refused() - before.prefetch_refused();
      rr.prefetch_promoted = after.prefetch_promoted() - before.prefetch_promoted();
      rr.prefetch_gated = after.prefetch_gated() - before.prefetch_gated();
      rr.lookahead_kept = after.lookahead_kept() - before.lookahead_kept();
      rr.precision = after.prefetch_precision();
      rr.demand_busy = after.demand_busy();
      results.push_back(rr);
    }
  }
  MOE_ASSIGN_OR_RETURN(double raw1, RawRead(*loc, int(qd), chunk));
  MOE_ASSIGN_OR_RETURN(double t_expert1, compute_floor());
  // The faster of the two measurements of each: the stricter floor.
  const double raw = std::max(raw0, raw1);
  const double t_expert = std::min(t_expert0, t_expert1);
  for (auto& r : results) {
    // Bytes the run had to read: a look-ahead read nobody used is not
    // counted (it only made the disk busier), so prefetch cannot lower the
    // bar it is measured against.
    const uint64_t unused = r.prefetch_issued > r.prefetch_used ? r.prefetch_issued - r.prefetch_used : 0;
    r.needed_bytes = r.disk_bytes > unused * sl.record_bytes ? r.disk_bytes - unused * sl.record_bytes : 0;
    const double floor_s = std::max(r.needed_bytes / (raw * 1e9), double(r.gets) * t_expert + r.dense_s);
    r.floor_tps = r.tokens / floor_s;
    r.vs_floor = r.tps / r.floor_tps;
  }
  if (json) {
    nlohmann::json j = {{"slice", {{"layers", sl.layers}, {"experts", sl.experts}, {"top_k", sl.top_k},
                                   {"hidden", sl.hidden}, {"moe_intermediate", sl.inter},
                                   {"format", std::string(Name(sl.format))}, {"record_bytes", sl.record_bytes}}},
                        {"raw_read_gbps", {raw0, raw1}},
                        {"expert_compute_seconds", {t_expert0, t_expert1}},
                        {"lookahead_accuracy", accuracy},
                        {"dense_ms_per_layer", dense_ms},
                        {"trace", trace_path.empty() ? "synthetic" : trace_path},
                        {"serial", serial}};
    for (const auto& r : results)
      j["runs"].push_back({{"budget_percent", r.budget_pct}, {"budget_bytes", r.budget_bytes},
                           {"prefetch", r.prefetch}, {"tokens", r.tokens}, {"seconds", r.seconds},
                           {"tokens_per_second", r.tps}, {"hit_rate", r.hit_rate}, {"disk_bytes", r.disk_bytes},
                           {"read_gbps", r.read_gbps}, {"needed_bytes", r.needed_bytes},
                           {"floor_tokens_per_second", r.floor_tps},
                           {"vs_floor", r.vs_floor}, {"prefetch_issued", r.prefetch_issued},
                           {"prefetch_used", r.prefetch_used}, {"prefetch_refused", r.prefetch_refused},
                           {"prefetch_promoted", r.prefetch_promoted}, {"prefetch_gated", r.prefetch_gated},
                           {"lookahead_kept", r.lookahead_kept},
                           {"gate_precision", r.precision}, {"gate_demand_busy", r.demand_busy},
                           {"compute_seconds", r.compute_s}, {"fetch_wait_seconds", r.fetch_s},
                           {"dense_seconds", r.dense_s}});
    std::printf("%s\n", j.dump(1).c_str());
    return absl::OkStatus();
  }
  std::printf("slice: %lld layers x %lld experts, top-%lld, H %lld, Im %lld, %s, %.1f MB per expert\n",
              (long long)sl.layers, (long long)sl.experts, (long long)sl.top_k, (long long)sl.hidden,
              (long long)sl.inter, std::string(Name(sl.format)).c_str(), sl.record_bytes / 1e6);
  std::printf("floors (same run, start / end): raw O_DIRECT read %.2f / %.2f GB/s; one expert from RAM %.2f / %.2f ms\n",
              raw0, raw1, t_expert0 * 1e3, t_expert1 * 1e3);
  std::printf("%-7s %-8s %8s %8s %9s %9s %11s %8s %11s %11s %15s %15s %9s\n", "budget", "prefetch", "tok/s", "hit",
              "read GB/s", "read/raw", "floor tok/s", "vs floor", "compute ms", "fetch ms", "hint reads/refused",
              "gated/promoted", "gate p/u");
  for (const auto& r : results)
    std::printf("%5d%%  %-8s %8.2f %7.1f%% %9.2f %8.0f%% %11.2f %7.0f%% %11.1f %11.1f %8llu/%-6llu %8llu/%-6llu %4.2f/%4.2f\n",
                r.budget_pct, r.prefetch ? "on" : "off", r.tps, 100 * r.hit_rate, r.read_gbps,
                100 * r.read_gbps / raw, r.floor_tps, 100 * r.vs_floor, 1e3 * r.compute_s / r.tokens,
                1e3 * r.fetch_s / r.tokens, (unsigned long long)r.prefetch_issued,
                (unsigned long long)r.prefetch_refused, (unsigned long long)r.prefetch_gated,
                (unsigned long long)r.prefetch_promoted, r.precision, r.demand_busy);
  std::printf("(compute ms / fetch ms: per timed token, in the kernels / waiting for FetchExperts%s)\n",
              dense_ms > 0 ? absl::StrCat("; plus ", dense_ms, " ms of dense work per layer").c_str() : "");
  return absl::OkStatus();
}

}  // namespace

int RunBenchE2e(int argc, char** argv) {
  bool help = false;
  if (auto s = DoBench(argc, argv, &help); !s.ok()) return Fail("bench e2e", s);
  return 0;
}

}  // namespace moe::cli
