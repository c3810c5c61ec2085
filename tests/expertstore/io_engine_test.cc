#include "common/expertstore/io_engine.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>

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

TEST(IoEngine, RejectsBadQueueDepthAndKind) {
  IoConfig c;
  c.queue_depth = 0;
  EXPECT_EQ(MakeIoEngine(c).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseIoKind("mmap").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ParseIoKind("pread").ok());
}

}  // namespace
}  // namespace moe::expertstore
