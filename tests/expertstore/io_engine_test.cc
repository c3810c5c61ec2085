#include "common/expertstore/io_engine.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <condition_variable>
#include <future>
#include <thread>
#include <mutex>
#include <vector>

#include "common/base/aligned_buffer.h"
#include "common/expertstore/io_chunks.h"
#include "tests/expertstore/synthetic_model.h"

namespace moe::expertstore {
namespace {

using testing::MakeTempDir;
using testing::WriteSyntheticModel;

class IoEngineTest : public ::testing::TestWithParam<IoConfig::Kind> {};

TEST_P(IoEngineTest, ReadsRecordsIdenticallyToPread) {
  std::string dir = MakeTempDir("io");
  auto m = WriteSyntheticModel(dir, 2, 4, [](int l, int e) { return 100000 + 4096 * e + 13 * l; }, 1);
  IoConfig c;
  c.kind = GetParam();
  c.queue_depth = 4;
  c.chunk_bytes = 16384;  // several chunks per record
  auto eng = MakeIoEngine(c);
  ASSERT_TRUE(eng.ok()) << eng.status();
  int fd = ::open(m.files[0].c_str(), O_RDONLY | O_DIRECT);
  if (fd < 0) fd = ::open(m.files[0].c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  for (const auto& [k, r] : m.recs) {
    AlignedBuffer buf(AlignUp(r.length, 4096)), ref(r.length);
    ReadOp op{fd, r.offset, r.length, AlignUp(r.length, 4096), buf.data(), -1, "test"};
    ASSERT_TRUE(ReadSync(**eng, op).ok());
    int bfd = ::open(m.files[0].c_str(), O_RDONLY);
    ASSERT_EQ(::pread(bfd, ref.data(), r.length, r.offset), ssize_t(r.length));
    ::close(bfd);
    EXPECT_EQ(std::memcmp(buf.data(), ref.data(), r.length), 0);
    EXPECT_EQ(crc32c::Extend(0, buf.data(), r.length), r.crc32c);
  }
  EXPECT_GE((*eng)->stats().bytes, 8u * 100000u);
  ::close(fd);
}

TEST_P(IoEngineTest, ShortReadIsACleanError) {
  std::string dir = MakeTempDir("io_short");
  auto m = WriteSyntheticModel(dir, 1, 2, [](int, int) { return 64 * 1024; }, 1);
  ASSERT_EQ(::truncate(m.files[0].c_str(), 64 * 1024 + 8192), 0);  // cut the second record
  IoConfig c;
  c.kind = GetParam();
  c.queue_depth = 2;
  c.chunk_bytes = 8192;
  auto eng = MakeIoEngine(c);
  ASSERT_TRUE(eng.ok());
  int fd = ::open(m.files[0].c_str(), O_RDONLY | O_DIRECT);
  if (fd < 0) fd = ::open(m.files[0].c_str(), O_RDONLY);
  AlignedBuffer buf(64 * 1024);
  auto s = ReadSync(**eng, ReadOp{fd, 64 * 1024, 64 * 1024, 64 * 1024, buf.data(), -1, "shard-0.bin record (0, 1)"});
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(std::string(s.message()).find("short read of shard-0.bin record (0, 1)"), std::string::npos) << s;
  // The engine keeps serving: the intact first record still reads.
  EXPECT_TRUE(ReadSync(**eng, ReadOp{fd, 0, 64 * 1024, 64 * 1024, buf.data(), -1, "ok"}).ok());
  ::close(fd);
}

TEST_P(IoEngineTest, IoErrorNamesTheRead) {
  IoConfig c;
  c.kind = GetParam();
  auto eng = MakeIoEngine(c);
  ASSERT_TRUE(eng.ok());
  AlignedBuffer buf(4096);
  auto s = ReadSync(**eng, ReadOp{-1, 0, 4096, 4096, buf.data(), -1, "bad-fd"});
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(std::string(s.message()).find("bad-fd"), std::string::npos);
}

// A queue-depth-1 engine whose first op is held (its completion callback
// blocks the engine's only thread) while the ops under test are queued; on
// release they run one at a time, so the completion order is the queue order.
class HeldEngine {
 public:
  HeldEngine(IoConfig::Kind kind, int max_spec) {
    dir_ = MakeTempDir("io_held");
    auto m = WriteSyntheticModel(dir_, 1, 1, [](int, int) { return 64 * 1024; }, 1);
    fd_ = ::open(m.files[0].c_str(), O_RDONLY);
    IoConfig c;
    c.kind = kind;
    c.queue_depth = 1;
    c.chunk_bytes = 4096;
    c.max_speculative_inflight = max_spec;
    auto e = MakeIoEngine(c);
    EXPECT_TRUE(e.ok()) << e.status();
    eng_ = std::move(*e);
    auto entered = std::make_shared<std::promise<void>>();
    auto entered_f = entered->get_future();
    auto release_f = release_.get_future().share();
    eng_->Submit(Op(0, false, 0, 4096), [entered, release_f, this](absl::Status) {
      Record(-1);
      entered->set_value();
      release_f.wait();
    });
    entered_f.wait();  // the engine thread is now blocked: everything below queues
  }
  ~HeldEngine() {
    eng_.reset();
    ::close(fd_);
  }
  ReadOp Op(uint64_t offset, bool speculative, uint64_t tag, uint64_t len = 2 * 4096) {
    ReadOp op;
    op.fd = fd_;
    op.offset = offset;
    op.length = len;
    op.dest = buf_.data() + offset % (32 * 1024);
    op.label = "held";
    op.speculative = speculative;
    op.tag = tag;
    return op;
  }
  void Submit(int id, bool speculative, uint64_t tag = 0) {
    ++submitted_;
    eng_->Submit(Op(4096 * uint64_t(id % 8), speculative, tag), [this, id](absl::Status s) {
      EXPECT_TRUE(s.ok()) << s;
      Record(id);
    });
  }
  IoEngine& engine() { return *eng_; }
  // Releases the held op and waits for every op; returns the completion order.
  std::vector<int> Run() {
    release_.set_value();
    for (;;) {
      {
        std::lock_guard<std::mutex> l(mu_);
        if (int(order_.size()) == submitted_ + 1) return {order_.begin() + 1, order_.end()};
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

 private:
  void Record(int id) {
    std::lock_guard<std::mutex> l(mu_);
    order_.push_back(id);
  }
  std::string dir_;
  int fd_ = -1;
  AlignedBuffer buf_{64 * 1024};
  std::unique_ptr<IoEngine> eng_;
  std::promise<void> release_;
  std::mutex mu_;
  std::vector<int> order_;
  int submitted_ = 0;
};

// A demand fetch joined prefetch 2: its queued chunks overtake prefetch 1
// (submitted earlier) but not demand reads queued before the promotion.
TEST_P(IoEngineTest, PromotedPrefetchOvertakesOtherPrefetches) {
  HeldEngine h(GetParam(), 1);
  h.Submit(1, true, 11);   // prefetch 1
  h.Submit(2, true, 22);   // prefetch 2
  h.Submit(3, false);      // demand
  EXPECT_EQ(h.engine().Promote(22), 2u);  // both of prefetch 2's chunks
  EXPECT_EQ(h.engine().Promote(99), 0u);  // no such op
  h.Submit(4, false);      // demand after the promotion: behind prefetch 2 (now demand)
  EXPECT_EQ(h.Run(), (std::vector<int>{3, 2, 4, 1}));
  EXPECT_EQ(h.engine().stats().promoted_chunks, 2u);
}

// Without a promotion the prefetches keep their order behind every demand read.
TEST_P(IoEngineTest, SpeculativeChunksGoOnlyWhenNoDemandIsQueued) {
  HeldEngine h(GetParam(), 1);
  h.Submit(1, true, 11);
  h.Submit(2, false);
  h.Submit(3, true, 33);
  h.Submit(4, false);
  EXPECT_EQ(h.Run(), (std::vector<int>{2, 4, 1, 3}));
}

// However deep the queue, at most max_speculative_inflight speculative
// chunks are on the device at once.
TEST_P(IoEngineTest, SpeculativeChunksInFlightAreCapped) {
  std::string dir = MakeTempDir("io_cap");
  auto m = WriteSyntheticModel(dir, 1, 1, [](int, int) { return 256 * 1024; }, 1);
  int fd = ::open(m.files[0].c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  for (int cap : {1, 2}) {
    IoConfig c;
    c.kind = GetParam();
    c.queue_depth = 8;
    c.chunk_bytes = 4096;
    c.max_speculative_inflight = cap;
    auto eng = MakeIoEngine(c);
    ASSERT_TRUE(eng.ok());
    AlignedBuffer buf(256 * 1024);
    std::mutex mu;
    std::condition_variable cv;
    int done = 0;
    for (int i = 0; i < 16; ++i) {
      ReadOp op{fd, uint64_t(i) * 16384, 16384, 16384, buf.data() + i * 16384, -1, "spec"};
      op.speculative = true;
      (*eng)->Submit(op, [&](absl::Status s) {
        EXPECT_TRUE(s.ok()) << s;
        std::lock_guard<std::mutex> l(mu);
        ++done;
        cv.notify_all();
      });
    }
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return done == 16; });
    auto st = (*eng)->stats();
    EXPECT_GE(st.speculative_high_water, 1u);
    EXPECT_LE(st.speculative_high_water, uint64_t(cap)) << "cap " << cap;
    EXPECT_EQ(st.speculative_inflight, 0u);
    EXPECT_EQ(st.bytes, 16u * 16384u);
  }
  ::close(fd);
}

INSTANTIATE_TEST_SUITE_P(Kinds, IoEngineTest, ::testing::Values(IoConfig::Kind::kUring, IoConfig::Kind::kPread),
                         [](const auto& info) { return info.param == IoConfig::Kind::kUring ? "uring" : "pread"; });

TEST(IoEngine, RegisteredBuffersReadTheSameBytes) {
  std::string dir = MakeTempDir("io_fixed");
  auto m = WriteSyntheticModel(dir, 1, 2, [](int, int) { return 40000; }, 1);
  IoConfig c;
  c.kind = IoConfig::Kind::kUring;
  auto eng = MakeIoEngine(c);
  ASSERT_TRUE(eng.ok());
  AlignedBuffer buf(AlignUp(40000, 4096));
  auto reg = (*eng)->RegisterBuffers({iovec{buf.data(), buf.capacity()}});
  int fd = ::open(m.files[0].c_str(), O_RDONLY);
  const auto& r = m.recs[1].second;
  ASSERT_TRUE(ReadSync(**eng, ReadOp{fd, r.offset, r.length, buf.capacity(), buf.data(), reg.ok() ? 0 : -1, "x"}).ok());
  EXPECT_EQ(crc32c::Extend(0, buf.data(), r.length), r.crc32c);
  ::close(fd);
}

// Demand reads overtake queued prefetch chunks (never chunks of other demand
// reads); prefetches keep their order at the back.
TEST(IoEngine, DemandChunksQueueAheadOfSpeculativeOnes) {
  std::deque<internal::Chunk> q;
  uint8_t buf[4 * 4096];
  auto op = [&](uint64_t offset, bool speculative) {
    auto st = std::make_shared<internal::OpState>();
    st->op.offset = offset;
    st->op.length = 2 * 4096;
    st->op.dest = buf;
    st->op.speculative = speculative;
    return internal::SplitOp(st, 4096);  // two chunks each
  };
  internal::EnqueueChunks(q, op(0, false));       // demand A
  internal::EnqueueChunks(q, op(100000, true));   // prefetch P
  internal::EnqueueChunks(q, op(200000, true));   // prefetch Q
  internal::EnqueueChunks(q, op(300000, false));  // demand B: ahead of P and Q, behind A
  std::vector<uint64_t> order;
  for (const auto& c : q) order.push_back(c.offset);
  EXPECT_EQ(order, (std::vector<uint64_t>{0, 4096, 300000, 304096, 100000, 104096, 200000, 204096}));
}

// The dispatch rule itself: demand first; a speculative front chunk waits
// while the cap is reached; a promotion moves the tagged op's queued chunks
// (in order) ahead of the first speculative chunk.
TEST(IoEngine, ChunkQueueDispatchAndPromotion) {
  internal::ChunkQueue q(1);
  uint8_t buf[4 * 4096];
  auto op = [&](uint64_t offset, bool speculative, uint64_t tag) {
    auto st = std::make_shared<internal::OpState>();
    st->op.offset = offset;
    st->op.length = 2 * 4096;
    st->op.dest = buf;
    st->op.speculative = speculative;
    st->op.tag = tag;
    return internal::SplitOp(st, 4096);  // two chunks each
  };
  auto offsets = [&] {
    std::vector<uint64_t> o;
    for (const auto& c : q.queued()) o.push_back(c.offset);
    return o;
  };
  EXPECT_FALSE(q.CanDispatch());
  q.Enqueue(op(100000, true, 1));  // prefetch P (tag 1)
  q.Enqueue(op(200000, true, 2));  // prefetch Q (tag 2)
  ASSERT_TRUE(q.CanDispatch());
  internal::Chunk p0 = q.Pop();    // P's first chunk: the one speculative slot
  EXPECT_TRUE(p0.speculative);
  EXPECT_FALSE(q.CanDispatch());   // cap reached, no demand queued
  q.Enqueue(op(0, false, 0));      // demand A goes first, despite the cap
  EXPECT_EQ(offsets(), (std::vector<uint64_t>{0, 4096, 104096, 200000, 204096}));
  EXPECT_EQ(q.Promote(7), 0u);     // no queued op has that tag: nothing moves
  EXPECT_EQ(offsets(), (std::vector<uint64_t>{0, 4096, 104096, 200000, 204096}));
  EXPECT_EQ(q.Promote(2), 2u);     // a fetch joined Q
  EXPECT_EQ(q.Promote(2), 0u);
  EXPECT_EQ(offsets(), (std::vector<uint64_t>{0, 4096, 200000, 204096, 104096}));
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(q.CanDispatch());
    internal::Chunk c = q.Pop();
    EXPECT_FALSE(c.speculative);   // A and the promoted Q: demand
  }
  EXPECT_FALSE(q.CanDispatch());   // P's second chunk waits for the first
  EXPECT_EQ(q.speculative_inflight(), 1u);
  q.Finished(p0);
  EXPECT_TRUE(q.CanDispatch());
  EXPECT_EQ(q.Pop().offset, 104096u);
  EXPECT_EQ(q.speculative_high_water(), 1u);
  // No cap: every speculative chunk may go.
  internal::ChunkQueue open(0);
  open.Enqueue(op(0, true, 0));
  open.Pop();
  EXPECT_TRUE(open.CanDispatch());
}

TEST(IoEngine, RejectsBadQueueDepthAndKind) {
  IoConfig c;
  c.queue_depth = 0;
  EXPECT_EQ(MakeIoEngine(c).status().code(), absl::StatusCode::kInvalidArgument);
  c.queue_depth = 4;
  c.max_speculative_inflight = -1;
  EXPECT_EQ(MakeIoEngine(c).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseIoKind("mmap").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ParseIoKind("pread").ok());
}

}  // namespace
}  // namespace moe::expertstore
