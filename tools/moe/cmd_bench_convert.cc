// `moe bench convert [--in HF_DIR] [--json]`: conversion MB/s (input bytes per
// second, page cache dropped before each run) against the raw sequential
// O_DIRECT read speed of the same input files, measured in the same run, plus
// the in-memory compute floor (FP8 decode + q4_g64 quantize of one expert
// matrix). Without --in, a synthetic FP8 checkpoint with GLM-5 routed-expert
// shapes (gate/up [2048, 6144], down [6144, 2048], 128x128 block scales) is
// generated into --tmp and removed afterwards.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/aligned_buffer.h"
#include "common/base/flags.h"
#include "common/base/status.h"
#include "common/format/convert.h"
#include "common/format/dtype.h"
#include "common/format/quantize.h"
#include "common/format/safetensors.h"
#include "nlohmann/json.hpp"
#include "tools/moe/commands.h"

namespace moe::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

// User + system CPU seconds of this process (all threads) so far.
double CpuSeconds() {
  rusage u;
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

uint64_t Rng(uint64_t* s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

// Writes one safetensors file of FP8 expert matrices (+ scales).
absl::Status WriteSyntheticShard(const std::string& path, int layer, int e_begin, int e_end,
                                 uint64_t* seed) {
  struct T {
    std::string name;
    std::string dtype;
    std::vector<int64_t> shape;
    uint64_t bytes;
  };
  std::vector<T> ts;
  for (int e = e_begin; e < e_end; ++e) {
    for (const char* p : {"gate_proj", "up_proj", "down_proj"}) {
      const bool down = std::strcmp(p, "down_proj") == 0;
      const int64_t r = down ? 6144 : 2048, c = down ? 2048 : 6144;
      const std::string n = absl::StrCat("model.layers.", layer, ".mlp.experts.", e, ".", p, ".weight");
      ts.push_back({n, "F8_E4M3", {r, c}, static_cast<uint64_t>(r * c)});
      ts.push_back({n + "_scale_inv", "F32", {r / 128, c / 128},
                    static_cast<uint64_t>((r / 128) * (c / 128) * 4)});
    }
  }
  nlohmann::json h = nlohmann::json::object();
  uint64_t off = 0;
  for (const auto& t : ts) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes}}};
    off += t.bytes;
  }
  std::string hs = h.dump();
  hs.resize((hs.size() + 7) / 8 * 8, ' ');
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = hs.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << hs;
  std::vector<uint8_t> buf;
  for (const auto& t : ts) {
    buf.resize(t.bytes);
    if (t.dtype == "F32") {
      for (uint64_t i = 0; i < t.bytes / 4; ++i) {
        const float v = 1e-4f * (1 + (Rng(seed) % 1000) / 1000.0f);
        std::memcpy(buf.data() + 4 * i, &v, 4);
      }
    } else {
      for (uint64_t i = 0; i < t.bytes; i += 8) {
        uint64_t v = Rng(seed);
        std::memcpy(buf.data() + i, &v, std::min<uint64_t>(8, t.bytes - i));
      }
      for (auto& b : buf) {
        if ((b & 0x7f) == 0x7f) b = 0;  // no NaN codes
      }
    }
    f.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(buf.size()));
  }
  f.close();
  if (!f) return absl::ResourceExhaustedError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::Status MakeSynthetic(const std::string& dir, int experts) {
  fs::create_directories(dir);
  std::ofstream(dir + "/config.json")
      << R"({"model_type": "glm_moe_dsa", "num_hidden_layers": 4, "hidden_size": 6144,
           "n_routed_experts": 256, "moe_intermediate_size": 2048})";
  uint64_t seed = 88172645463325252ull;
  const int half = experts / 2;
  MOE_RETURN_IF_ERROR(WriteSyntheticShard(dir + "/model-00001-of-00002.safetensors", 3, 0, half, &seed));
  MOE_RETURN_IF_ERROR(
      WriteSyntheticShard(dir + "/model-00002-of-00002.safetensors", 3, half, experts, &seed));
  for (const auto& e : fs::directory_iterator(dir)) {
    const int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd >= 0) {
      ::fsync(fd);
      ::close(fd);
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> Shards(const std::string& dir) {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".safetensors") v.push_back(e.path().string());
  }
  std::sort(v.begin(), v.end());
  return v;
}

void DropCache(const std::vector<std::string>& files) {
  for (const auto& f : files) {
    const int fd = ::open(f.c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// Sequential read of every file; O_DIRECT when `direct`. Returns MB/s.
absl::StatusOr<double> ReadAllFiles(const std::vector<std::string>& files, bool direct) {
  AlignedBuffer buf(16 << 20);
  uint64_t total = 0;
  const auto t0 = Clock::now();
  for (const auto& f : files) {
    const int fd = ::open(f.c_str(), O_RDONLY | (direct ? O_DIRECT : 0));
    if (fd < 0) return absl::UnavailableError(absl::StrCat("open ", f, ": ", std::strerror(errno)));
    while (true) {
      const ssize_t n = ::read(fd, buf.data(), buf.capacity());
      if (n < 0) {
        ::close(fd);
        return absl::UnavailableError(absl::StrCat("read ", f, ": ", std::strerror(errno)));
      }
      if (n == 0) break;
      total += static_cast<uint64_t>(n);
    }
    ::close(fd);
  }
  return total / 1e6 / Seconds(t0);
}

struct Stat {
  double median = 0, lo = 0, hi = 0;
};
Stat Summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

}  // namespace

int RunBenchConvert(int argc, char** argv) {
  std::string in, tmp = "/tmp/moe_bench_convert";
  int64_t experts = 12, repeats = 3;
  bool json = false;
  FlagSet flags("convert",
                "Conversion MB/s vs. raw O_DIRECT read MB/s of the same input (same run).");
  flags.AddString("in", &in, "HF checkpoint to convert (default: synthetic GLM-5 expert shapes)");
  flags.AddString("tmp", &tmp, "scratch directory (synthetic input and outputs; removed after)");
  flags.AddInt("experts", &experts, "synthetic input: routed experts (37.7 MB of FP8 each)");
  flags.AddInt("repeats", &repeats, "timed repeats (median and range reported)");
  flags.AddBool("json", &json, "print JSON");
  if (auto s = flags.Parse(argc, argv); !s.ok()) return Fail("bench convert", s);
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (repeats < 1 || experts < 2) {
    return Fail("bench convert", absl::InvalidArgumentError("--repeats >= 1, --experts >= 2"));
  }
  fs::remove_all(tmp);
  const bool synthetic = in.empty();
  if (synthetic) {
    in = tmp + "/in";
    if (auto s = MakeSynthetic(in, static_cast<int>(experts)); !s.ok()) return Fail("bench convert", s);
  }
  const std::vector<std::string> files = Shards(in);
  uint64_t in_bytes = 0;
  for (const auto& f : files) in_bytes += fs::file_size(f);

  std::vector<double> raw_direct, raw_cached, conv, conv_cpu, quant, quant_cpu;
  const std::string out = tmp + "/out";
  for (int r = 0; r < repeats; ++r) {
    auto d = ReadAllFiles(files, true);
    if (!d.ok()) return Fail("bench convert", d.status());
    raw_direct.push_back(*d);
    auto c = ReadAllFiles(files, false);  // warm page cache: memory-speed floor of buffered reads
    if (!c.ok()) return Fail("bench convert", c.status());
    raw_cached.push_back(*c);
    DropCache(files);
    fs::remove_all(out);
    ConvertOptions o;
    o.in_dir = in;
    o.out_dir = out;
    const auto t0 = Clock::now();
    const double c0 = CpuSeconds();
    auto res = ConvertCheckpoint(o);
    const double sec = Seconds(t0);
    if (!res.ok()) return Fail("bench convert", res.status());
    conv.push_back(in_bytes / 1e6 / sec);
    conv_cpu.push_back(in_bytes / 1e6 / (CpuSeconds() - c0));
  }
  {  // compute floor: the converter's fused FP8 decode + q4_g64 quantize of one
     // [2048, 6144] expert matrix, from memory to memory (no I/O, no CRC)
    const int64_t rows = 2048, cols = 6144, chunk = 16;
    std::vector<uint8_t> q(rows * cols);
    uint64_t seed = 1;
    for (auto& b : q) b = static_cast<uint8_t>(Rng(&seed) & 0x7e);
    float table[256];
    for (int i = 0; i < 256; ++i) table[i] = Fp8E4M3ToF32(static_cast<uint8_t>(i));
    std::vector<uint8_t> data(DataBytes(QFormat::kQ4G64, rows, cols));
    std::vector<float> scales(rows * GroupsPerRow(QFormat::kQ4G64, cols));
    const int64_t rb = RowBytes(QFormat::kQ4G64, cols), ng = GroupsPerRow(QFormat::kQ4G64, cols);
    for (int r = 0; r < repeats; ++r) {
      const auto t0 = Clock::now();
      const double c0 = CpuSeconds();
#pragma omp parallel
      {
        std::vector<float> buf(chunk * cols);
#pragma omp for schedule(dynamic, 1)
        for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
          for (int64_t i = 0; i < chunk * cols; ++i) {
            buf[i] = table[q[r0 * cols + i]] * 1e-3f;
          }
          (void)QuantizeMatrix(QFormat::kQ4G64, buf.data(), chunk, cols, data.data() + r0 * rb,
                               scales.data() + r0 * ng);
        }
      }
      quant.push_back(rows * cols / 1e6 / Seconds(t0));
      quant_cpu.push_back(rows * cols / 1e6 / (CpuSeconds() - c0));
    }
  }
  fs::remove_all(tmp);
  const Stat d = Summarize(raw_direct), c = Summarize(raw_cached), v = Summarize(conv),
             qz = Summarize(quant), vc = Summarize(conv_cpu), qc = Summarize(quant_cpu);
  if (json) {
    auto js = [](const Stat& s) { return nlohmann::json{{"median", s.median}, {"min", s.lo}, {"max", s.hi}}; };
    nlohmann::json j = {{"input", synthetic ? "synthetic" : in},
                        {"input_mb", in_bytes / 1e6},
                        {"repeats", repeats},
                        {"convert_mb_s", js(v)},
                        {"raw_read_direct_mb_s", js(d)},
                        {"raw_read_cached_mb_s", js(c)},
                        {"compute_floor_mb_s", js(qz)},
                        {"convert_mb_per_cpu_s", js(vc)},
                        {"compute_floor_mb_per_cpu_s", js(qc)},
                        {"convert_over_direct_read", v.median / d.median}};
    std::printf("%s\n", j.dump(1).c_str());
  } else {
    std::printf("input: %s, %.1f MB in %zu shards, %lld repeats (median [min, max])\n",
                synthetic ? "synthetic GLM-5 expert shapes, FP8" : in.c_str(), in_bytes / 1e6,
                files.size(), static_cast<long long>(repeats));
    std::printf("  raw sequential read, O_DIRECT   %9.1f MB/s [%.1f, %.1f]\n", d.median, d.lo, d.hi);
    std::printf("  raw sequential read, page cache %9.1f MB/s [%.1f, %.1f]\n", c.median, c.lo, c.hi);
    std::printf("  compute floor (fp8->q4_g64)     %9.1f MB/s [%.1f, %.1f]\n", qz.median, qz.lo, qz.hi);
    std::printf("  moe convert (cache dropped)     %9.1f MB/s [%.1f, %.1f]  = %.2f x O_DIRECT read\n",
                v.median, v.lo, v.hi, v.median / d.median);
    std::printf("  per CPU-second (user+sys; robust to a shared machine):\n");
    std::printf("  compute floor                   %9.1f MB/cpu-s [%.1f, %.1f]\n", qc.median, qc.lo, qc.hi);
    std::printf("  moe convert                     %9.1f MB/cpu-s [%.1f, %.1f]\n", vc.median, vc.lo, vc.hi);
  }
  return 0;
}

}  // namespace moe::cli
