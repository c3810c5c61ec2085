// moe bench io [--manifest FILE | --dir DIR] [--queue-depth 8] [--json]
// Reads every expert record three ways in one run, each from disk (O_DIRECT,
// page-cache tier off, an empty arena each time), and reports GB/s:
//   raw      : liburing O_DIRECT reads of the same records at the same queue
//              depth and chunk size into one buffer, no checksum, no
//              bookkeeping (the floor the disk sets);
//   uring    : expertd's miss path (ExpertStore::Fetch per layer batch:
//              slab allocation, io_uring reads, crc32c, publish, lease);
//   pread    : the same miss path on the pread thread pool.
// Without --manifest it writes a synthetic GLM-5-sized model (records of
// --record-bytes) under --dir first.
#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/base/aligned_buffer.h"
#include "common/base/flags.h"
#include "common/base/status.h"
#include "common/format/crc32c.h"
#include "common/expertstore/record_locator.h"
#include "common/expertstore/store.h"
#include "nlohmann/json.hpp"
#include "tools/moe/bench_io.h"
#include "tools/moe/commands.h"

namespace moe::cli {
namespace {

using namespace expertstore;

absl::StatusOr<std::string> WriteModel(const std::string& dir, int layers, int experts, uint64_t bytes) {
  std::string path = dir + "/bench-shard.bin";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return absl::InternalError("cannot create " + path);
  AlignedBuffer buf(AlignUp(bytes, 4096));
  std::vector<std::pair<std::pair<int, int>, RecordLocation>> recs;
  uint64_t off = 0, x = 88172645463325252ull;
  for (int l = 0; l < layers; ++l) {
    for (int e = 0; e < experts; ++e) {
      auto* w = reinterpret_cast<uint64_t*>(buf.data());
      for (size_t i = 0; i < buf.capacity() / 8; ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w[i] = x;
      }
      RecordLocation r;
      r.file = 0;
      r.offset = off;
      r.length = bytes;
      r.crc32c = crc32c::Extend(0, buf.data(), bytes);
      if (::pwrite(fd, buf.data(), buf.capacity(), static_cast<off_t>(off)) != ssize_t(buf.capacity())) {
        ::close(fd);
        return absl::InternalError("short write to " + path);
      }
      off += buf.capacity();
      recs.push_back({{l, e}, r});
    }
  }
  ::fsync(fd);
  ::close(fd);
  std::string manifest = dir + "/bench.manifest";
  MOE_RETURN_IF_ERROR(ManifestLocator::Write(manifest, "bench-io", layers, experts, {path}, recs));
  return manifest;
}

}  // namespace

// Raw floor: keep `qd` chunk reads in flight over all records (bench_io.h).
absl::StatusOr<double> RawRead(const ManifestLocator& loc, int qd, uint64_t chunk) {
  std::vector<int> fds;
  for (const auto& f : loc.files()) {
    int fd = ::open(f.c_str(), O_RDONLY | O_DIRECT);
    if (fd < 0) return absl::InternalError("O_DIRECT open failed: " + f);
    fds.push_back(fd);
  }
  struct Req {
    int fd;
    uint64_t off, len;
  };
  std::vector<Req> reqs;
  uint64_t total = 0;
  for (int l = 0; l < loc.num_layers(); ++l) {
    for (int e = 0; e < loc.num_experts(); ++e) {
      auto r = loc.Locate(l, e);
      if (!r.ok()) continue;
      uint64_t len = AlignUp(r->length, 4096);
      for (uint64_t o = 0; o < len; o += chunk) reqs.push_back({fds[r->file], r->offset + o, std::min(chunk, len - o)});
      total += r->length;
    }
  }
  io_uring ring;
  if (io_uring_queue_init(static_cast<unsigned>(qd), &ring, 0) < 0) return absl::UnavailableError("io_uring");
  AlignedBuffer buf(chunk * qd);
  auto t0 = std::chrono::steady_clock::now();
  size_t next = 0, done = 0;
  int inflight = 0;
  std::vector<int> free_slots;
  for (int i = 0; i < qd; ++i) free_slots.push_back(i);
  while (done < reqs.size()) {
    while (inflight < qd && next < reqs.size()) {
      int slot = free_slots.back();
      free_slots.pop_back();
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      io_uring_prep_read(sqe, reqs[next].fd, buf.data() + size_t(slot) * chunk, static_cast<unsigned>(reqs[next].len),
                         reqs[next].off);
      io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(slot));
      ++next;
      ++inflight;
    }
    io_uring_submit(&ring);
    io_uring_cqe* cqe;
    if (io_uring_wait_cqe(&ring, &cqe) < 0) break;
    if (cqe->res < 0) {
      io_uring_queue_exit(&ring);
      return absl::DataLossError("raw read failed");
    }
    free_slots.push_back(static_cast<int>(io_uring_cqe_get_data64(cqe)));
    io_uring_cqe_seen(&ring, cqe);
    --inflight;
    ++done;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  io_uring_queue_exit(&ring);
  for (int fd : fds) ::close(fd);
  return double(total) / secs / 1e9;
}

namespace {

absl::StatusOr<double> StoreRead(const std::string& manifest, IoConfig::Kind kind, int qd, uint64_t chunk,
                                 int batch, std::string* engine) {
  MOE_ASSIGN_OR_RETURN(auto loc, ManifestLocator::Load(manifest));
  int L = loc->num_layers(), E = loc->num_experts();
  uint64_t total = 0, rec = 0;
  for (int l = 0; l < L; ++l)
    for (int e = 0; e < E; ++e)
      if (auto r = loc->Locate(l, e); r.ok()) {
        total += r->length;
        rec = std::max<uint64_t>(rec, AlignUp(r->length, 4096));
      }
  StoreConfig c;
  c.budget_bytes = rec * uint64_t(L) * E;
  c.top_k = static_cast<uint32_t>(std::min(batch, E));
  c.io.kind = kind;
  c.io.queue_depth = qd;
  c.io.chunk_bytes = chunk;
  c.page_cache_tier = false;
  c.max_sessions = 1;
  MOE_ASSIGN_OR_RETURN(auto st, ExpertStore::Create(std::move(loc), c));
  *engine = st->Stats().io_engine;
  auto sess = st->OpenSession(static_cast<uint32_t>(::getpid()));
  if (!sess.ok()) return sess.status();
  auto t0 = std::chrono::steady_clock::now();
  for (int l = 0; l < L; ++l) {
    for (int e0 = 0; e0 < E; e0 += batch) {
      std::vector<int> ids;
      for (int e = e0; e < std::min(E, e0 + batch); ++e) ids.push_back(e);
      auto r = st->Fetch(sess->index, l, ids);
      for (auto& x : r) {
        if (!x.ok()) return x.status();
        st->table().Release(sess->index, *x);
      }
    }
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return double(total) / secs / 1e9;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int RunBenchIo(int argc, char** argv) {
  std::string manifest, dir = "/tmp";
  int64_t qd = 8, batch = 8, repeats = 3, layers = 6, experts = 8;
  uint64_t record_bytes = 19ull << 20, chunk = 2ull << 20;
  bool json = false;
  FlagSet flags("io", "Expert miss path vs raw O_DIRECT reads; io_uring vs pread pool.");
  flags.AddString("manifest", &manifest, "expert record manifest (default: write a synthetic model)");
  flags.AddString("dir", &dir, "where to write the synthetic model");
  flags.AddInt("layers", &layers, "synthetic: layers");
  flags.AddInt("experts", &experts, "synthetic: experts per layer");
  flags.AddBytes("record-bytes", &record_bytes, "synthetic: bytes per record (GLM-5 int4: ~19 MiB)");
  flags.AddInt("queue-depth", &qd, "reads in flight");
  flags.AddBytes("chunk", &chunk, "bytes per read request");
  flags.AddInt("batch", &batch, "experts per Fetch (one layer's top-k)");
  flags.AddInt("repeats", &repeats, "repeats (median reported)");
  flags.AddBool("json", &json, "print JSON");
  if (auto s = flags.Parse(argc, argv); !s.ok()) return Fail("bench io", s);
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  bool cleanup = false;
  if (manifest.empty()) {
    auto m = WriteModel(dir, static_cast<int>(layers), static_cast<int>(experts), record_bytes);
    if (!m.ok()) return Fail("bench io", m.status());
    manifest = *m;
    cleanup = true;
  }
  auto loc = expertstore::ManifestLocator::Load(manifest);
  if (!loc.ok()) return Fail("bench io", loc.status());
  std::vector<double> raw, uring, pread;
  std::string eng_u, eng_p;
  for (int r = 0; r < repeats; ++r) {
    auto a = RawRead(**loc, static_cast<int>(qd), chunk);
    if (!a.ok()) return Fail("bench io", a.status());
    raw.push_back(*a);
    auto b = StoreRead(manifest, expertstore::IoConfig::Kind::kUring, static_cast<int>(qd), chunk,
                       static_cast<int>(batch), &eng_u);
    if (!b.ok()) return Fail("bench io", b.status());
    uring.push_back(*b);
    auto c = StoreRead(manifest, expertstore::IoConfig::Kind::kPread, static_cast<int>(qd), chunk,
                       static_cast<int>(batch), &eng_p);
    if (!c.ok()) return Fail("bench io", c.status());
    pread.push_back(*c);
  }
  if (cleanup) {
    for (const auto& f : (*loc)->files()) ::unlink(f.c_str());
    ::unlink(manifest.c_str());
  }
  auto spread = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return std::pair{v.front(), v.back()};
  };
  double mr = Median(raw), mu = Median(uring), mp = Median(pread);
  if (json) {
    nlohmann::json j = {{"queue_depth", qd},   {"chunk_bytes", chunk},  {"batch", batch},
                        {"repeats", repeats},  {"raw_gbps", raw},       {"uring_gbps", uring},
                        {"pread_gbps", pread}, {"uring_engine", eng_u}, {"uring_vs_raw", mr > 0 ? mu / mr : 0},
                        {"pread_vs_raw", mr > 0 ? mp / mr : 0}};
    std::printf("%s\n", j.dump(1).c_str());
    return 0;
  }
  auto [r0, r1] = spread(raw);
  auto [u0, u1] = spread(uring);
  auto [p0, p1] = spread(pread);
  std::printf("records: %d x %d, qd %ld, chunk %lu KiB, batch %ld, %ld repeats (median [min..max])\n",
              (*loc)->num_layers(), (*loc)->num_experts(), (long)qd, (unsigned long)(chunk >> 10), (long)batch,
              (long)repeats);
  std::printf("raw O_DIRECT io_uring : %.2f GB/s [%.2f..%.2f]\n", mr, r0, r1);
  std::printf("miss path (%s) : %.2f GB/s [%.2f..%.2f]  = %.0f%% of raw\n", eng_u.c_str(), mu, u0, u1,
              mr > 0 ? 100 * mu / mr : 0);
  std::printf("miss path (pread)     : %.2f GB/s [%.2f..%.2f]  = %.0f%% of raw\n", mp, p0, p1,
              mr > 0 ? 100 * mp / mr : 0);
  return 0;
}

}  // namespace moe::cli
