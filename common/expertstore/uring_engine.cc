// The io_uring IoEngine: one ring thread owns the ring; Submit queues chunks
// and wakes the thread through an eventfd that the ring itself polls
// (IORING_OP_POLL_ADD), so the thread only ever blocks in io_uring_wait_cqe.
#include <liburing.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <thread>

#include "common/base/log.h"
#include "common/expertstore/io_chunks.h"
#include "common/expertstore/io_engine.h"

namespace moe::expertstore {
namespace {

using internal::Chunk;
using internal::OpState;

uint64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

constexpr uint64_t kWakeTag = 1;  // user_data of the eventfd poll

class UringEngine final : public IoEngine {
 public:
  static absl::StatusOr<std::unique_ptr<IoEngine>> Create(const IoConfig& c) {
    auto e = std::unique_ptr<UringEngine>(new UringEngine(c));
    int qd = c.queue_depth < 1 ? 1 : c.queue_depth;
    int r = io_uring_queue_init(static_cast<unsigned>(qd + 2), &e->ring_, 0);
    if (r < 0) return absl::UnavailableError(absl::StrCat("io_uring_queue_init: ", strerror(-r)));
    e->ring_ok_ = true;
    e->efd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (e->efd_ < 0) return absl::UnavailableError("eventfd failed");
    e->qd_ = qd;
    e->thread_ = std::thread([p = e.get()] { p->Loop(); });
    return std::unique_ptr<IoEngine>(std::move(e));
  }
  ~UringEngine() override {
    if (thread_.joinable()) {
      {
        std::lock_guard<std::mutex> l(mu_);
        stop_ = true;
      }
      Wake();
      thread_.join();
    }
    for (auto& c : pending_.TakeAll()) {
      c.op->Fail(absl::CancelledError("io engine shut down"));
      if (c.op->ChunkDone()) c.op->Finish();
    }
    if (ring_ok_) io_uring_queue_exit(&ring_);
    if (efd_ >= 0) ::close(efd_);
  }
  void Submit(ReadOp op, ReadDone done) override {
    auto st = std::make_shared<OpState>();
    st->op = std::move(op);
    st->done = std::move(done);
    auto chunks = internal::SplitOp(st, cfg_.chunk_bytes);
    {
      std::lock_guard<std::mutex> l(mu_);
      counters_.Submitted();
      pending_.Enqueue(std::move(chunks));
    }
    Wake();
  }
  size_t Promote(uint64_t tag) override {
    size_t n;
    {
      std::lock_guard<std::mutex> l(mu_);
      n = pending_.Promote(tag);
      counters_.Promoted(n);
    }
    if (n) Wake();
    return n;
  }
  std::string name() const override { return registered_ ? "io_uring+fixed" : "io_uring"; }
  int queue_depth() const override { return qd_; }
  absl::Status RegisterBuffers(const std::vector<iovec>& iov) override {
    if (iov.empty() || iov.size() > 16384) return absl::InvalidArgumentError("buffer count out of range");
    for (const auto& v : iov)
      if (v.iov_len > (1ull << 30)) return absl::InvalidArgumentError("registered buffer over 1 GiB");
    int r = io_uring_register_buffers(&ring_, iov.data(), static_cast<unsigned>(iov.size()));
    if (r < 0) return absl::UnavailableError(absl::StrCat("io_uring_register_buffers: ", strerror(-r)));
    registered_ = true;
    return absl::OkStatus();
  }
  bool buffers_registered() const override { return registered_; }
  IoStats stats() const override {
    std::lock_guard<std::mutex> l(mu_);
    IoStats s = counters_.Snapshot(NowNs());
    s.speculative_inflight = pending_.speculative_inflight();
    s.speculative_high_water = pending_.speculative_high_water();
    return s;
  }

 private:
  explicit UringEngine(const IoConfig& c) : cfg_(c), pending_(c.max_speculative_inflight) {}
  void Wake() {
    uint64_t one = 1;
    ssize_t r = ::write(efd_, &one, sizeof one);
    (void)r;
  }
  void ArmWake() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    io_uring_prep_poll_add(sqe, efd_, POLLIN);
    io_uring_sqe_set_data64(sqe, kWakeTag);
  }
  void Prep(Chunk* c) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    const ReadOp& op = c->op->op;
    if (registered_ && op.buf_index >= 0) {
      io_uring_prep_read_fixed(sqe, op.fd, c->dest, static_cast<unsigned>(c->len), c->offset, op.buf_index);
    } else {
      io_uring_prep_read(sqe, op.fd, c->dest, static_cast<unsigned>(c->len), c->offset);
    }
    io_uring_sqe_set_data(sqe, c);
  }
  void Loop() {
    ArmWake();
    io_uring_submit(&ring_);
    for (;;) {
      {
        std::lock_guard<std::mutex> l(mu_);
        if (stop_ && counters_.inflight() == 0) break;
        while (!stop_ && counters_.inflight() < uint64_t(qd_) && pending_.CanDispatch()) {
          auto* c = new Chunk(pending_.Pop());
          counters_.Started(NowNs());
          Prep(c);
        }
      }
      io_uring_submit(&ring_);
      io_uring_cqe* cqe = nullptr;
      int r = io_uring_wait_cqe(&ring_, &cqe);
      if (r == -EINTR) continue;
      if (r < 0) {
        MOE_LOG(ERROR) << "io_uring_wait_cqe: " << strerror(-r);
        continue;
      }
      unsigned head;
      unsigned n = 0;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        ++n;
        uint64_t tag = io_uring_cqe_get_data64(cqe);
        if (tag == kWakeTag) {
          uint64_t v;
          while (::read(efd_, &v, sizeof v) > 0) {
          }
          ArmWake();
          continue;
        }
        Complete(static_cast<Chunk*>(io_uring_cqe_get_data(cqe)), cqe->res);
      }
      io_uring_cq_advance(&ring_, n);
    }
  }
  void Complete(Chunk* c, int res) {
    auto left = internal::ChunkResult(*c, res);
    if (left.ok() && *left > 0) {  // partial read: resubmit the rest
      uint64_t got = c->len - *left;
      {
        std::lock_guard<std::mutex> l(mu_);
        counters_.AddBytes(got);
      }
      c->offset += got;
      c->dest += got;
      c->len = *left;
      Prep(c);
      return;
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      if (res > 0) counters_.AddBytes(res);
      counters_.Finished(left.ok(), NowNs());
      pending_.Finished(*c);
    }
    if (!left.ok()) c->op->Fail(left.status());
    if (c->op->ChunkDone()) c->op->Finish();
    delete c;
  }

  IoConfig cfg_;
  io_uring ring_{};
  bool ring_ok_ = false;
  int efd_ = -1;
  int qd_ = 1;
  bool registered_ = false;
  std::thread thread_;
  mutable std::mutex mu_;
  internal::ChunkQueue pending_;  // guarded by mu_
  bool stop_ = false;
  IoCounters counters_;  // guarded by mu_
};

}  // namespace

std::unique_ptr<IoEngine> MakePreadEngine(const IoConfig& c);

absl::StatusOr<IoConfig::Kind> ParseIoKind(const std::string& s) {
  if (s == "auto") return IoConfig::Kind::kAuto;
  if (s == "uring" || s == "io_uring") return IoConfig::Kind::kUring;
  if (s == "pread") return IoConfig::Kind::kPread;
  return absl::InvalidArgumentError(absl::StrCat("--io: '", s, "' (expected auto, uring or pread)"));
}

absl::StatusOr<std::unique_ptr<IoEngine>> MakeIoEngine(const IoConfig& config) {
  if (config.queue_depth < 1 || config.queue_depth > 4096)
    return absl::InvalidArgumentError(absl::StrCat("queue depth ", config.queue_depth, " (1..4096)"));
  if (config.max_speculative_inflight < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("speculative reads in flight ", config.max_speculative_inflight, " (>= 0; 0 = no cap)"));
  if (config.kind == IoConfig::Kind::kPread) return MakePreadEngine(config);
  auto u = UringEngine::Create(config);
  if (u.ok() || config.kind == IoConfig::Kind::kUring) return u;
  MOE_LOG(WARNING) << "io_uring unavailable (" << u.status().message() << "); using the pread thread pool";
  return MakePreadEngine(config);
}

absl::Status ReadSync(IoEngine& engine, ReadOp op) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  absl::Status result;
  engine.Submit(std::move(op), [&](absl::Status s) {
    std::lock_guard<std::mutex> l(mu);
    result = std::move(s);
    done = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return done; });
  return result;
}

}  // namespace moe::expertstore
