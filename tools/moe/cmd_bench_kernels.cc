// `moe bench kernels [--json]`: weight GB/s of the quantized matmul kernels
// against the memory read bandwidth measured in the same run.
//
// Method: weights are cold — every call uses the next matrix of a rotation
// set larger than 2x the last-level cache (sysconf L3; min 64 MiB), so each
// call streams its weights from DRAM. The memory read probe streams the same
// buffer with 1 and 2 threads before every shape group; each row's ratio uses
// the probe taken just before it (the machine is shared and noisy). Each
// configuration runs `repeats` timed repeats of >= min-seconds; we report the
// median and the spread (min, max). Activation quantization is inside the
// timed call, as in the engine.
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/aligned_buffer.h"
#include "common/base/bandwidth_probe.h"
#include "common/base/flags.h"
#include "common/base/status.h"
#include "common/kernels/kernels.h"
#include "nlohmann/json.hpp"
#include "tools/moe/commands.h"

namespace moe::cli {
namespace {

using kernels::Isa;
using kernels::Kernels;
using kernels::KernelConfig;
using kernels::Path;
using kernels::QMatrix;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// 1-minute load average (the machine is shared; every figure is reported
// with the load it was taken under). -1 if unavailable.
double LoadAverage() {
  double l[1];
  return getloadavg(l, 1) == 1 ? l[0] : -1.0;
}

struct ShapeSpec {
  std::string name;
  int64_t rows, cols;
  std::vector<QFormat> formats;
  bool float_path = true;  // also time the float path by default (--paths overrides)
};

std::vector<ShapeSpec> DefaultShapes() {
  using F = QFormat;
  const std::vector<F> expert = {F::kQ4G32, F::kQ4G64, F::kQ4G128, F::kQ8Row,
                                 F::kQ8G128, F::kQ2Row, F::kBF16};
  const std::vector<F> dense = {F::kQ4G64, F::kQ8Row};
  // The IDOT-vs-float comparison runs on the expert shapes (and the f32
  // router); the dense shapes time the default (IDOT) path only.
  return {{"expert_gate_up", 2048, 6144, expert, true}, {"expert_down", 6144, 2048, expert, true},
          {"q_b", 16384, 2048, dense, false},           {"o_proj", 6144, 16384, dense, false},
          {"kv_b", 28672, 512, dense, false},           {"router", 256, 6144, {F::kQ8Row, F::kF32}, true},
          {"lm_head", 154880, 6144, {F::kQ8Row}, false}};
}

// Fills the rotation buffer: random bytes (any byte is a valid q8/q4/q2 code
// group) or benign floats for f32 / bf16 (no NaN / denormal slow paths).
void Fill(AlignedBuffer& buf, bool floats) {
  uint64_t s = 0x9E3779B97F4A7C15ull;
  auto* p = reinterpret_cast<uint64_t*>(buf.data());
  const size_t n = buf.capacity() / 8;
  for (size_t i = 0; i < n; ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    p[i] = floats ? (s & 0x007F007F007F007Full) | 0x3C003C003C003C00ull : s;
  }
}

struct Options {
  bool json = false;
  int repeats = 5;
  double min_seconds = 0.02;
  std::vector<int64_t> batches = {1, 4, 32};
  std::vector<int64_t> threads = {1, 2};
  std::vector<Path> paths = {Path::kIdot, Path::kFloat};
  Isa isa = Isa::kAuto;
};

struct Timing {
  double median, min, max;  // wall seconds per call
  double cpu_median;        // process CPU seconds per call / threads
};

// Times `call(i)` (i = rotation index) per the options.
template <typename F>
Timing TimeCalls(const Options& opt, int64_t nmat, int64_t per_call_mats, int threads, F&& call) {
  int64_t next = 0;
  auto one = [&] {
    call(next);
    next = (next + per_call_mats) % std::max<int64_t>(nmat, 1);
  };
  const auto t0 = Clock::now();
  one();  // warm-up and estimate
  const double est = std::max(Seconds(t0, Clock::now()), 1e-7);
  const int64_t calls = std::clamp<int64_t>(static_cast<int64_t>(opt.min_seconds / est) + 1, 1, 100000);
  const int repeats = est > 0.5 ? std::min(opt.repeats, 3) : opt.repeats;  // lm_head at S = 32
  std::vector<double> v, cv;
  for (int r = 0; r < repeats; ++r) {
    const double c0 = ProcessCpuSeconds();
    const auto a = Clock::now();
    for (int64_t c = 0; c < calls; ++c) one();
    v.push_back(Seconds(a, Clock::now()) / static_cast<double>(calls));
    cv.push_back((ProcessCpuSeconds() - c0) / threads / static_cast<double>(calls));
  }
  std::sort(v.begin(), v.end());
  std::sort(cv.begin(), cv.end());
  return {v[v.size() / 2], v.front(), v.back(), cv[cv.size() / 2]};
}

absl::Status ParseList(const std::string& text, std::vector<int64_t>* out, const char* flag) {
  out->clear();
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t v;
    if (!absl::SimpleAtoi(part, &v) || v <= 0)
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": bad value '", part, "'"));
    out->push_back(v);
  }
  return absl::OkStatus();
}

// Fork/join overhead of the pool: back-to-back tiny matmuls, 2 threads vs 1,
// with workers spinning, and the first call after the workers went to sleep.
nlohmann::json MeasureForkJoin(Isa isa) {
  // 64 rows = 4 tasks of 16 rows, so 2 threads really fork and join.
  constexpr int64_t kRows = 64;
  std::vector<uint8_t> data(RowBytes(QFormat::kQ8Row, 64) * kRows, 1);
  std::vector<float> scales(kRows, 0.01f), x(64, 0.5f), y(kRows);
  const QMatrix w{QFormat::kQ8Row, kRows, 64, data.data(), scales.data()};
  auto per_call = [&](int threads, int sleep_us, int n) {
    KernelConfig c;
    c.isa = isa;
    c.threads = threads;
    auto k = std::move(Kernels::Create(c)).value();
    (void)k->Matmul(w, x.data(), 1, y.data());
    double total = 0;
    for (int i = 0; i < n; ++i) {
      if (sleep_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      const auto t0 = Clock::now();
      (void)k->Matmul(w, x.data(), 1, y.data());
      total += Seconds(t0, Clock::now());
    }
    return total / n * 1e6;
  };
  const double t1 = per_call(1, 0, 20000), t2 = per_call(2, 0, 20000);
  const double s1 = per_call(1, 2000, 200), s2 = per_call(2, 2000, 200);
  return {{"tiny_call_us_1thread", t1},
          {"tiny_call_us_2threads", t2},
          {"fork_join_us", t2 - t1},
          {"after_sleep_call_us_1thread", s1},
          {"after_sleep_call_us_2threads", s2},
          {"fork_join_after_sleep_us", s2 - s1}};
}

}  // namespace

int RunBenchKernels(int argc, char** argv) {
  Options opt;
  std::string shapes_flag, formats_flag, batches_flag = "1,4,32", threads_flag = "1,2",
                                          paths_flag = "idot,float", isa_flag = "auto";
  int64_t repeats = 5;
  double min_seconds = 0.02;
  uint64_t rotate = 0;
  FlagSet flags("bench kernels",
                "Quantized matmul throughput vs memory read bandwidth (docs/BENCHMARKS.md ## kernels).");
  flags.AddBool("json", &opt.json, "print JSON instead of a table");
  flags.AddString("shapes", &shapes_flag, "comma list of shape names (default: all)");
  flags.AddString("formats", &formats_flag, "comma list of formats overriding each shape's list");
  flags.AddString("batches", &batches_flag, "comma list of S");
  flags.AddString("threads", &threads_flag, "comma list of thread counts");
  flags.AddString("paths", &paths_flag, "comma list of idot,float");
  flags.AddString("isa", &isa_flag, "kernel ISA: auto, scalar, avx2, avx512");
  flags.AddInt("repeats", &repeats, "timed repeats per configuration");
  flags.AddDouble("min-seconds", &min_seconds, "minimum duration of one repeat");
  flags.AddBytes("rotate", &rotate, "weight rotation set size (default 2 x L3, >= 64M)");
  if (auto s = flags.Parse(argc, argv); !s.ok()) return Fail("bench kernels", s);
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  opt.repeats = static_cast<int>(std::clamp<int64_t>(repeats, 1, 1000));
  opt.min_seconds = min_seconds;
  if (auto s = ParseList(batches_flag, &opt.batches, "batches"); !s.ok()) return Fail("bench kernels", s);
  if (auto s = ParseList(threads_flag, &opt.threads, "threads"); !s.ok()) return Fail("bench kernels", s);
  opt.paths.clear();
  for (absl::string_view p : absl::StrSplit(paths_flag, ',')) {
    if (p == "idot") opt.paths.push_back(Path::kIdot);
    else if (p == "float") opt.paths.push_back(Path::kFloat);
    else return Fail("bench kernels", absl::InvalidArgumentError(absl::StrCat("--paths: bad value '", p, "'")));
  }
  auto isa = kernels::ParseIsa(isa_flag);
  if (!isa.ok()) return Fail("bench kernels", isa.status());
  opt.isa = *isa == Isa::kAuto ? kernels::BestIsa() : *isa;
  if (!kernels::IsaSupported(opt.isa))
    return Fail("bench kernels", absl::FailedPreconditionError(absl::StrCat("ISA ", AV(kernels::IsaName(opt.isa)), " not supported here")));

  std::vector<ShapeSpec> shapes = DefaultShapes();
  if (!shapes_flag.empty()) {
    std::vector<ShapeSpec> keep;
    for (absl::string_view n : absl::StrSplit(shapes_flag, ',')) {
      auto it = std::find_if(shapes.begin(), shapes.end(), [&](const ShapeSpec& s) { return s.name == SV(n); });
      if (it == shapes.end())
        return Fail("bench kernels", absl::InvalidArgumentError(absl::StrCat("--shapes: unknown shape '", n, "'")));
      keep.push_back(*it);
    }
    shapes = keep;
  }
  if (!formats_flag.empty()) {
    std::vector<QFormat> fmts;
    for (absl::string_view n : absl::StrSplit(formats_flag, ',')) {
      auto f = QFormatFromName(SV(n));
      if (!f) return Fail("bench kernels", absl::InvalidArgumentError(absl::StrCat("--formats: unknown format '", n, "'")));
      fmts.push_back(*f);
    }
    for (auto& s : shapes) s.formats = fmts;
  }

  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 <= 0) l3 = 32 << 20;
  if (rotate == 0) rotate = std::max<uint64_t>(2 * static_cast<uint64_t>(l3), 64ull << 20);
  uint64_t buf_bytes = rotate;
  for (const auto& s : shapes)
    for (QFormat f : s.formats)
      buf_bytes = std::max<uint64_t>(buf_bytes, AlignUp(DataBytes(f, s.rows, s.cols), 64) +
                                                    AlignUp(ScaleBytes(f, s.rows, s.cols), 64));
  AlignedBuffer buf(buf_bytes, 4096);
  bool filled_floats = false;
  Fill(buf, filled_floats);

  nlohmann::json out;
  out["isa"] = std::string(kernels::IsaName(opt.isa));
  out["l3_bytes"] = l3;
  out["rotate_bytes"] = rotate;
  out["idot_peak_gops_per_core"] = kernels::MeasureIdotPeakGops(opt.isa, 0.2);
  out["fork_join"] = MeasureForkJoin(opt.isa);
  nlohmann::json probes = nlohmann::json::array();
  nlohmann::json results = nlohmann::json::array();
  std::vector<std::vector<double>> all_bw(3), all_cpu_bw(3);

  if (!opt.json) {
    std::printf("isa %s, L3 %ld MiB, rotation %llu MiB, int8 dot peak %.0f GOPS/core\n",
                out["isa"].get<std::string>().c_str(), l3 >> 20,
                static_cast<unsigned long long>(rotate >> 20), out["idot_peak_gops_per_core"].get<double>());
    std::printf("fork/join overhead per call: %.2f us spinning, %.2f us after sleep\n",
                out["fork_join"]["fork_join_us"].get<double>(), out["fork_join"]["fork_join_after_sleep_us"].get<double>());
    std::printf("%-15s %-8s %-6s %-8s %3s %2s %10s %7s %8s %8s %6s %8s %6s\n", "shape", "format", "path",
                "kernel", "S", "T", "median_us", "spread", "GB/s", "GFLOP/s", "ratio", "cpuGB/s", "cpu_r");
  }
  out["loadavg_start"] = LoadAverage();
  for (const auto& shape : shapes) {
    ReadBandwidth bw[3] = {};
    const double load = LoadAverage();
    for (int t : {1, 2}) {
      bw[t] = ProbeMemoryRead(buf.data(), rotate, t, 5);
      all_bw[t].push_back(bw[t].wall_gbps);
      all_cpu_bw[t].push_back(bw[t].cpu_gbps);
    }
    probes.push_back({{"before", shape.name},
                      {"gbps_1thread", bw[1].wall_gbps},
                      {"gbps_2threads", bw[2].wall_gbps},
                      {"cpu_gbps_1thread", bw[1].cpu_gbps},
                      {"cpu_gbps_2threads", bw[2].cpu_gbps},
                      {"loadavg_1min", load}});
    for (QFormat f : shape.formats) {
      const bool is_float = !Info(f).integer;
      if (is_float != filled_floats) {
        filled_floats = is_float;
        Fill(buf, filled_floats);
      }
      const int64_t data_bytes = DataBytes(f, shape.rows, shape.cols);
      const int64_t scale_bytes = ScaleBytes(f, shape.rows, shape.cols);
      const int64_t mat_bytes = AlignUp(data_bytes, 64) + AlignUp(scale_bytes, 64);
      const int64_t nmat = std::max<int64_t>(1, static_cast<int64_t>(rotate) / mat_bytes);
      std::vector<QMatrix> mats;
      for (int64_t i = 0; i < nmat; ++i) {
        uint8_t* base = buf.data() + i * mat_bytes;
        float* sc = reinterpret_cast<float*>(base + AlignUp(data_bytes, 64));
        for (int64_t j = 0; j < scale_bytes / 4; ++j) sc[j] = 0.01f;
        mats.push_back(QMatrix{f, shape.rows, shape.cols, base, scale_bytes ? sc : nullptr});
      }
      for (Path path : opt.paths) {
        if (path == Path::kIdot && is_float) continue;
        if (path == Path::kFloat && !is_float && !shape.float_path && !flags.WasSet("paths")) continue;
        for (int64_t threads : opt.threads) {
          KernelConfig kc;
          kc.isa = opt.isa;
          kc.path = path;
          kc.threads = static_cast<int>(threads);
          auto k = std::move(Kernels::Create(kc)).value();
          for (int64_t S : opt.batches) {
            std::vector<float> x(S * shape.cols), y(S * shape.rows);
            for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7919) % 997) / 997.0f - 0.5f;
            std::vector<std::pair<std::string, int>> kernels_to_run = {{"matmul", 1}};
            if (shape.name == "expert_gate_up" && S <= 4) kernels_to_run.push_back({"gate_up_swiglu", 2});
            for (const auto& [kname, per_call] : kernels_to_run) {
              const int nmats_per_call = per_call;  // a lambda cannot capture a binding in clang 14
              if (nmats_per_call == 2 && nmat < 2) continue;
              const Timing tm = TimeCalls(opt, nmat, nmats_per_call, static_cast<int>(threads), [&](int64_t i) {
                absl::Status st = nmats_per_call == 2
                                      ? k->GateUpSwiGLU(mats[i], mats[(i + 1) % nmat], x.data(), S, y.data())
                                      : k->Matmul(mats[i], x.data(), S, y.data());
                if (!st.ok()) std::fprintf(stderr, "moe bench kernels: %s\n", std::string(st.message()).c_str());
              });
              const double wbytes = static_cast<double>(data_bytes + scale_bytes) * nmats_per_call;
              const double gbps = wbytes / tm.median * 1e-9;
              const double gflops = 2.0 * S * shape.rows * shape.cols * nmats_per_call / tm.median * 1e-9;
              const ReadBandwidth& mb = bw[std::min<int64_t>(threads, 2)];
              const double ratio = gbps / mb.wall_gbps;
              const double cpu_gbps = wbytes / tm.cpu_median * 1e-9;
              const double cpu_ratio = cpu_gbps / mb.cpu_gbps;
              results.push_back({{"kernel", kname},
                                 {"shape", shape.name},
                                 {"format", std::string(Name(f))},
                                 {"path", std::string(kernels::PathName(path))},
                                 {"rows", shape.rows},
                                 {"cols", shape.cols},
                                 {"batch", S},
                                 {"threads", threads},
                                 {"seconds", tm.median},
                                 {"seconds_min", tm.min},
                                 {"seconds_max", tm.max},
                                 {"weight_bytes", wbytes},
                                 {"weight_gbps", gbps},
                                 {"gflops", gflops},
                                 {"memory_read_gbps_same_threads", mb.wall_gbps},
                                 {"bw_ratio", ratio},
                                 {"cpu_seconds", tm.cpu_median},
                                 {"cpu_weight_gbps", cpu_gbps},
                                 {"cpu_memory_read_gbps_same_threads", mb.cpu_gbps},
                                 {"cpu_bw_ratio", cpu_ratio},
                                 {"loadavg_1min", load}});
              if (!opt.json) {
                std::printf("%-15s %-8s %-6s %-8s %3lld %2lld %10.1f %6.1f%% %8.2f %8.1f %6.2f %8.2f %6.2f\n",
                            shape.name.c_str(), std::string(Name(f)).c_str(),
                            std::string(kernels::PathName(path)).c_str(),
                            kname == "matmul" ? "matmul" : "gate_up", static_cast<long long>(S),
                            static_cast<long long>(threads), tm.median * 1e6,
                            (tm.max - tm.min) / tm.median * 100, gbps, gflops, ratio, cpu_gbps, cpu_ratio);
                std::fflush(stdout);
              }
            }
          }
        }
      }
    }
  }
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  out["memory_read_gbps_1thread"] = median(all_bw[1]);
  out["memory_read_gbps_2threads"] = median(all_bw[2]);
  out["memory_read_gbps"] = median(all_bw[2]);
  out["cpu_memory_read_gbps_1thread"] = median(all_cpu_bw[1]);
  out["cpu_memory_read_gbps_2threads"] = median(all_cpu_bw[2]);
  out["loadavg_end"] = LoadAverage();
  out["memory_probes"] = probes;
  out["results"] = results;
  if (opt.json) {
    std::printf("%s\n", out.dump(1).c_str());
  } else {
    std::printf("memory read GB/s (median of probes): 1 thread %.1f, 2 threads %.1f; CPU-time based %.1f, %.1f\n",
                median(all_bw[1]), median(all_bw[2]), median(all_cpu_bw[1]), median(all_cpu_bw[2]));
    std::printf("load average (1 min): %.2f at start, %.2f at end\n", out["loadavg_start"].get<double>(),
                out["loadavg_end"].get<double>());
  }
  return 0;
}

}  // namespace moe::cli
