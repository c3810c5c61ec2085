#include "common/expertstore/page_cache_probe.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/expertstore/synthetic_model.h"

namespace moe {
namespace {

// A file of `bytes` written and flushed, its pages then dropped from the page cache.
int WriteDropped(const std::string& path, size_t bytes) {
  std::vector<char> data(bytes, 'x');
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  ::fsync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  return fd;
}

TEST(PageCacheProbe, TellsCachedRangesWithoutReadingThem) {
  const std::string dir = expertstore::testing::MakeTempDir("probe");
  const size_t kBytes = 64 * 4096;
  const int fd = WriteDropped(dir + "/f.bin", kBytes);
  auto probe = PageCacheProbe::Open(fd);
  ASSERT_TRUE(probe.ok()) << probe.status();
  if ((*probe)->Cached(0, kBytes)) GTEST_SKIP() << "this file system keeps dropped pages (tmpfs?)";
  EXPECT_FALSE((*probe)->Cached(0, 4096));
  // Asking does not bring the pages in.
  EXPECT_FALSE((*probe)->Cached(0, kBytes));
  // Read the middle 8 pages: that range (and any sub-range, unaligned too) is cached, a range that
  // runs past it is not.
  std::vector<char> buf(8 * 4096);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);  // no readahead: exactly the pages read are cached
  ASSERT_EQ(::pread(fd, buf.data(), buf.size(), 16 * 4096), static_cast<ssize_t>(buf.size()));
  EXPECT_TRUE((*probe)->Cached(16 * 4096, 8 * 4096));
  EXPECT_TRUE((*probe)->Cached(16 * 4096 + 100, 5000));
  EXPECT_FALSE((*probe)->Cached(16 * 4096, 9 * 4096));
  EXPECT_FALSE((*probe)->Cached(15 * 4096 + 4000, 200));
  // Outside the file: never cached; an empty range: trivially.
  EXPECT_FALSE((*probe)->Cached(kBytes - 10, 20));
  EXPECT_FALSE((*probe)->Cached(kBytes + 4096, 1));
  EXPECT_TRUE((*probe)->Cached(0, 0));
  ::close(fd);
}

TEST(PageCacheProbe, EmptyFile) {
  const std::string dir = expertstore::testing::MakeTempDir("probe_empty");
  const int fd = WriteDropped(dir + "/e.bin", 0);
  auto probe = PageCacheProbe::Open(fd);
  ASSERT_TRUE(probe.ok()) << probe.status();
  EXPECT_FALSE((*probe)->Cached(0, 1));
  EXPECT_TRUE((*probe)->Cached(0, 0));
  ::close(fd);
}

}  // namespace
}  // namespace moe
