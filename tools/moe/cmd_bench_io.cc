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
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
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
// As fast as the device allows from user space: one registered buffer
// (fixed reads, no per-read page pinning), every free slot refilled and
// submitted in one call, every finished completion reaped at once.
absl::StatusOr<double> RawRead(const ManifestLocator& loc, int qd, uint64_t chunk) {
  if (qd < 1 || chunk < 4096 || chunk % 4096 != 0)
    return absl::InvalidArgumentError(absl::StrCat("raw read: queue depth ", qd, " and chunk ", chunk,
                                                   " (>= 1, a multiple of 4 KiB)"));
  std::vector<int> fds;
  auto close_all = [&] {
    for (int fd : fds) ::close(fd);
  };
  for (const auto& f : loc.files()) {
    int fd = ::open(f.c_str(), O_RDONLY | O_DIRECT);
    if (fd < 0) {
      close_all();
      return absl::InternalError("O_DIRECT open failed: " + f);
    }
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
  if (io_uring_queue_init(static_cast<unsigned>(qd), &ring, 0) < 0) {
    close_all();
    return absl::UnavailableError("io_uring");
  }
  AlignedBuffer buf(chunk * qd);
  iovec iov{buf.data(), chunk * qd};
  const bool fixed = io_uring_register_buffers(&ring, &iov, 1) == 0;
  auto t0 = std::chrono::steady_clock::now();
  size_t next = 0, done = 0;
  std::vector<int> free_slots;
  for (int i = 0; i < qd; ++i) free_slots.push_back(i);
  absl::Status err;
  // After an error: no new reads, but every read in flight is reaped before
  // the buffer goes away.
  while (done < next || (err.ok() && next < reqs.size())) {
    while (err.ok() && !free_slots.empty() && next < reqs.size()) {
      int slot = free_slots.back();
      free_slots.pop_back();
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      uint8_t* dst = buf.data() + size_t(slot) * chunk;
      const Req& q = reqs[next];
      if (fixed) {
        io_uring_prep_read_fixed(sqe, q.fd, dst, static_cast<unsigned>(q.len), q.off, 0);
      } else {
        io_uring_prep_read(sqe, q.fd, dst, static_cast<unsigned>(q.len), q.off);
      }
      io_uring_sqe_set_data64(sqe, (uint64_t(next) << 16) | uint64_t(slot));
      ++next;
    }
    if (int r = io_uring_submit_and_wait(&ring, 1); r < 0) {
      if (r == -EINTR) continue;
      err = absl::UnavailableError(absl::StrCat("io_uring_submit_and_wait: ", strerror(-r)));
      break;  // nothing can be reaped reliably now; the ring exit below waits for it
    }
    io_uring_cqe* cqes[64];
    unsigned n = io_uring_peek_batch_cqe(&ring, cqes, 64);
    for (unsigned i = 0; i < n; ++i) {
      const uint64_t tag = io_uring_cqe_get_data64(cqes[i]);
      const Req& q = reqs[tag >> 16];
      if (cqes[i]->res < 0 || uint64_t(cqes[i]->res) != q.len)
        err = absl::DataLossError(absl::StrCat("raw read at offset ", q.off, ": ", cqes[i]->res, " of ", q.len));
      free_slots.push_back(static_cast<int>(tag & 0xffff));
      ++done;
    }
    io_uring_cq_advance(&ring, n);
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  io_uring_queue_exit(&ring);
  close_all();
  MOE_RETURN_IF_ERROR(err);
  return double(total) / secs / 1e9;
}

namespace {

absl::StatusOr<double> StoreRead(const std::string& manifest, IoConfig::Kind kind, int qd, uint64_t chunk,
                                 int batch, bool huge_pages, std::string* engine) {
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
  c.huge_pages = huge_pages;
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

absl::StatusOr<std::vector<int64_t>> ParseList(const std::string& flag, const std::string& v, bool bytes) {
  std::vector<int64_t> out;
  for (absl::string_view p : absl::StrSplit(v, ',', absl::SkipEmpty())) {
    uint64_t x = 0;
    if (bytes) {
      auto b = ParseByteSize(std::string(p));
      if (!b.ok()) return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", b.status().message()));
      x = *b;
    } else if (!absl::SimpleAtoi(p, &x)) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", p, "' is not a number"));
    }
    if (x == 0) return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", p, "' must be > 0"));
    out.push_back(static_cast<int64_t>(x));
  }
  return out;
}

// --qds / --chunks: raw vs miss path at every (queue depth, chunk), repeats
// interleaved (raw first on even repeats, miss path first on odd ones).
absl::Status Sweep(const std::string& manifest, const ManifestLocator& loc, const std::vector<int64_t>& qds,
                   const std::vector<int64_t>& chunks, int batch, int repeats, bool huge_pages, bool json) {
  struct Cell {
    int64_t qd, chunk;
    std::vector<double> raw, miss;
  };
  std::vector<Cell> cells;
  for (int64_t q : qds)
    for (int64_t c : chunks) cells.push_back({q, c, {}, {}});
  std::string engine;
  for (int r = 0; r < repeats; ++r) {
    for (auto& c : cells) {
      for (int k = 0; k < 2; ++k) {
        if ((k == 0) == (r % 2 == 0)) {
          MOE_ASSIGN_OR_RETURN(double g, RawRead(loc, int(c.qd), uint64_t(c.chunk)));
          c.raw.push_back(g);
        } else {
          MOE_ASSIGN_OR_RETURN(double g, StoreRead(manifest, IoConfig::Kind::kUring, int(c.qd), uint64_t(c.chunk),
                                                   batch, huge_pages, &engine));
          c.miss.push_back(g);
        }
      }
    }
  }
  const Cell* best_raw = &cells[0];
  const Cell* best_miss = &cells[0];
  for (const auto& c : cells) {
    if (Median(c.raw) > Median(best_raw->raw)) best_raw = &c;
    if (Median(c.miss) > Median(best_miss->miss)) best_miss = &c;
  }
  const double ratio = Median(best_miss->miss) / Median(best_raw->raw);
  if (json) {
    nlohmann::json j = {{"records", loc.num_layers() * loc.num_experts()}, {"batch", batch}, {"repeats", repeats},
                        {"huge_pages", huge_pages}, {"engine", engine}};
    for (const auto& c : cells)
      j["sweep"].push_back({{"queue_depth", c.qd}, {"chunk_bytes", c.chunk}, {"raw_gbps", c.raw}, {"miss_gbps", c.miss},
                            {"miss_vs_raw", Median(c.miss) / Median(c.raw)}});
    j["best_raw"] = {{"queue_depth", best_raw->qd}, {"chunk_bytes", best_raw->chunk}, {"gbps", Median(best_raw->raw)}};
    j["best_miss"] = {{"queue_depth", best_miss->qd}, {"chunk_bytes", best_miss->chunk}, {"gbps", Median(best_miss->miss)}};
    j["best_miss_vs_best_raw"] = ratio;
    std::printf("%s\n", j.dump(1).c_str());
    return absl::OkStatus();
  }
  std::printf("records: %d x %d, batch %d, %d repeats (median [min..max]), arena %s, engine %s\n", loc.num_layers(),
              loc.num_experts(), batch, repeats, huge_pages ? "2 MiB huge pages" : "4 KiB pages", engine.c_str());
  std::printf("%5s %9s %22s %22s %8s\n", "qd", "chunk", "raw GB/s", "miss path GB/s", "miss/raw");
  for (const auto& c : cells) {
    auto mm = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return absl::StrFormat("%.2f [%.2f..%.2f]", v[v.size() / 2], v.front(), v.back());
    };
    std::printf("%5lld %8lldK %22s %22s %7.0f%%\n", (long long)c.qd, (long long)(c.chunk >> 10), mm(c.raw).c_str(),
                mm(c.miss).c_str(), 100 * Median(c.miss) / Median(c.raw));
  }
  std::printf("best raw: %.2f GB/s (qd %lld, %lld KiB); best miss path: %.2f GB/s (qd %lld, %lld KiB) = %.0f%% of it\n",
              Median(best_raw->raw), (long long)best_raw->qd, (long long)(best_raw->chunk >> 10),
              Median(best_miss->miss), (long long)best_miss->qd, (long long)(best_miss->chunk >> 10), 100 * ratio);
  return absl::OkStatus();
}

}  // namespace

int RunBenchIo(int argc, char** argv) {
  std::string manifest, dir = "/tmp";
  int64_t qd = 8, batch = 8, repeats = 3, layers = 6, experts = 8;
  uint64_t record_bytes = 19ull << 20, chunk = 2ull << 20;
  bool json = false, huge_pages = false;
  std::string qds_s, chunks_s;
  FlagSet flags("io", "Expert miss path vs raw O_DIRECT reads; io_uring vs pread pool.");
  flags.AddString("qds", &qds_s, "sweep: queue depths, e.g. 1,2,4,8,16,32 (with --chunks; raw vs miss path each)");
  flags.AddString("chunks", &chunks_s, "sweep: request sizes, e.g. 256K,1M,2M,4M");
  flags.AddBool("huge-pages", &huge_pages, "miss path: arena on 2 MiB hugetlb pages (vm.nr_hugepages must hold it)");
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
  if (!qds_s.empty() || !chunks_s.empty()) {
    auto qds = ParseList("qds", qds_s.empty() ? std::to_string(qd) : qds_s, false);
    auto chunks = ParseList("chunks", chunks_s.empty() ? std::to_string(chunk) : chunks_s, true);
    absl::Status st = !qds.ok() ? qds.status() : !chunks.ok() ? chunks.status() : absl::OkStatus();
    if (st.ok())
      for (int64_t c : *chunks)
        if (c % 4096 != 0) st = absl::InvalidArgumentError(absl::StrCat("--chunks: ", c, " is not a multiple of 4 KiB"));
    if (st.ok())
      st = Sweep(manifest, **loc, *qds, *chunks, static_cast<int>(batch), static_cast<int>(repeats), huge_pages, json);
    if (cleanup) {
      for (const auto& f : (*loc)->files()) ::unlink(f.c_str());
      ::unlink(manifest.c_str());
    }
    return st.ok() ? 0 : Fail("bench io", st);
  }
  std::vector<double> raw, uring, pread;
  std::string eng_u, eng_p;
  for (int r = 0; r < repeats; ++r) {
    auto a = RawRead(**loc, static_cast<int>(qd), chunk);
    if (!a.ok()) return Fail("bench io", a.status());
    raw.push_back(*a);
    auto b = StoreRead(manifest, expertstore::IoConfig::Kind::kUring, static_cast<int>(qd), chunk,
                       static_cast<int>(batch), huge_pages, &eng_u);
    if (!b.ok()) return Fail("bench io", b.status());
    uring.push_back(*b);
    auto c = StoreRead(manifest, expertstore::IoConfig::Kind::kPread, static_cast<int>(qd), chunk,
                       static_cast<int>(batch), huge_pages, &eng_p);
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
