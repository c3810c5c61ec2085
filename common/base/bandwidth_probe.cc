#include "common/base/bandwidth_probe.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/base/aligned_buffer.h"

namespace moe {
namespace {
using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

double ProcessCpuSeconds() {
  rusage u;
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

ReadBandwidth ProbeMemoryRead(const uint8_t* buf, size_t bytes, int threads, int reps) {
  std::vector<double> gbps, cpu_gbps;
  const size_t n = bytes / sizeof(uint64_t);
  const auto* p = reinterpret_cast<const uint64_t*>(buf);
  threads = std::max(threads, 1);
  for (int rep = 0; rep < std::max(reps, 1); ++rep) {
    std::atomic<uint64_t> sink{0};
    const double c0 = ProcessCpuSeconds();
    const auto t0 = Clock::now();
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t) {
      ts.emplace_back([&, t] {
        const size_t i0 = n * t / threads, i1 = n * (t + 1) / threads;
        uint64_t a[8] = {};
        for (size_t i = i0; i + 8 <= i1; i += 8) {
          __builtin_prefetch(p + i + 256);
          for (int j = 0; j < 8; ++j) a[j] += p[i + j];
        }
        sink += a[0] ^ a[1] ^ a[2] ^ a[3] ^ a[4] ^ a[5] ^ a[6] ^ a[7];
      });
    }
    for (auto& t : ts) t.join();
    gbps.push_back(static_cast<double>(bytes) / Since(t0) * 1e-9);
    cpu_gbps.push_back(static_cast<double>(bytes) * threads / std::max(ProcessCpuSeconds() - c0, 1e-9) * 1e-9);
  }
  std::sort(gbps.begin(), gbps.end());
  std::sort(cpu_gbps.begin(), cpu_gbps.end());
  return {gbps[gbps.size() / 2], cpu_gbps[cpu_gbps.size() / 2]};
}

size_t MemoryProbeBytes() {
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return std::max<size_t>(512ull << 20, l3 > 0 ? 4 * static_cast<size_t>(l3) : 0);
}

ReadBandwidth ProbeMemoryReadFresh(size_t bytes, int threads, int reps) {
  AlignedBuffer buf(bytes, 64);
  uint64_t s = 0x9E3779B97F4A7C15ull;
  auto* p = reinterpret_cast<uint64_t*>(buf.data());
  for (size_t i = 0; i < bytes / 8; ++i) p[i] = (s += 0x9E3779B97F4A7C15ull);
  return ProbeMemoryRead(buf.data(), bytes, threads, reps);
}

absl::StatusOr<double> ProbeDiskRead(const std::vector<FileRange>& ranges, uint64_t block, int threads) {
  struct Job {
    int fd;
    uint64_t off, len;
    const std::string* path;
  };
  std::map<std::string, int> fds;
  std::vector<Job> jobs;
  block = std::max<uint64_t>(AlignUp(block, kDirectIoAlign), kDirectIoAlign);
  for (const FileRange& r : ranges) {
    int& fd = fds[r.path];
    if (fd == 0) {
      fd = ::open(r.path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
      if (fd < 0) {
        const int e = errno;
        for (auto& [p, f] : fds)
          if (f > 0) ::close(f);
        return absl::UnavailableError(absl::StrCat("O_DIRECT open ", r.path, ": ", std::strerror(e)));
      }
    }
    const uint64_t a = r.offset / kDirectIoAlign * kDirectIoAlign;
    const uint64_t b = AlignUp(r.offset + r.length, kDirectIoAlign);
    for (uint64_t o = a; o < b; o += block) jobs.push_back({fd, o, std::min(block, b - o), &fds.find(r.path)->first});
  }
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> bytes{0};
  std::mutex mu;
  absl::Status err;
  const auto t0 = Clock::now();
  std::vector<std::thread> ts;
  for (int t = 0; t < std::max(threads, 1); ++t) {
    ts.emplace_back([&] {
      AlignedBuffer buf(block);
      for (size_t i; (i = next++) < jobs.size();) {
        const Job& j = jobs[i];
        const ssize_t n = ::pread(j.fd, buf.data(), j.len, static_cast<off_t>(j.off));
        if (n < 0) {
          std::lock_guard<std::mutex> l(mu);
          if (err.ok()) err = absl::UnavailableError(absl::StrCat("read ", *j.path, ": ", std::strerror(errno)));
          return;
        }
        bytes += static_cast<uint64_t>(n);
      }
    });
  }
  for (auto& t : ts) t.join();
  const double s = Since(t0);
  for (auto& [p, f] : fds) ::close(f);
  if (!err.ok()) return err;
  return s > 0 ? static_cast<double>(bytes.load()) / s * 1e-9 : 0.0;
}

}  // namespace moe
