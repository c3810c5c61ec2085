// Atomic publish (common/base/atomic_file.h): a replaced file is either the
// old one or the whole new one - also when the writer is killed between its
// write and the rename - and every failure names the step and the file.
#include "common/base/atomic_file.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace moe {
namespace {

namespace fs = std::filesystem;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("moe-atomic-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "state.bin").string();
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  std::string path_;
};

TEST_F(AtomicFileTest, WritesAndReplacesLeavingNoTempFile) {
  ASSERT_TRUE(WriteFileAtomically(path_, "first").ok());
  EXPECT_EQ(Slurp(path_), "first");
  ASSERT_TRUE(WriteFileAtomically(path_, std::string(1 << 20, 'x')).ok());
  EXPECT_EQ(Slurp(path_), std::string(1 << 20, 'x'));
  EXPECT_FALSE(fs::exists(path_ + ".tmp"));
  struct stat st;
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

TEST_F(AtomicFileTest, AWriterKilledBetweenWriteAndRenameLeavesTheOldFileIntact) {
  ASSERT_TRUE(WriteFileAtomically(path_, "old content").ok());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The new content is fully written (and flushed to the page cache), then
    // the process dies before Commit's rename.
    auto f = AtomicFile::Create(path_);
    if (!f.ok() || !f->Append(std::string(4 << 20, 'n')).ok()) ::_exit(3);
    ::kill(::getpid(), SIGKILL);
    ::_exit(4);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  EXPECT_EQ(Slurp(path_), "old content");
  EXPECT_TRUE(fs::exists(path_ + ".tmp"));  // the dead writer's stale temp file
  // The next publish replaces both the stale temp and the old file.
  ASSERT_TRUE(WriteFileAtomically(path_, "new content").ok());
  EXPECT_EQ(Slurp(path_), "new content");
  EXPECT_FALSE(fs::exists(path_ + ".tmp"));
}

TEST_F(AtomicFileTest, AbandonedWritesRemoveTheTempFileAndKeepTheOld) {
  ASSERT_TRUE(WriteFileAtomically(path_, "keep").ok());
  {
    auto f = AtomicFile::Create(path_);
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_TRUE(f->PWrite("abc", 3, 100).ok());
    EXPECT_TRUE(fs::exists(f->temp_path()));
  }  // no Commit
  EXPECT_EQ(Slurp(path_), "keep");
  EXPECT_FALSE(fs::exists(path_ + ".tmp"));
}

TEST_F(AtomicFileTest, StreamedWritesAtOffsetsArePublishedWhole) {
  auto f = AtomicFile::Create(path_);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_TRUE(f->PWrite("world", 5, 6).ok());
  ASSERT_TRUE(f->PWrite("hello ", 6, 0).ok());
  EXPECT_FALSE(fs::exists(path_));  // nothing visible before Commit
  ASSERT_TRUE(f->Commit().ok());
  EXPECT_EQ(Slurp(path_), "hello world");
  const absl::Status again = f->Commit();
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition) << again;
  EXPECT_EQ(f->Append("more").code(), absl::StatusCode::kFailedPrecondition);
}

// Two writers of one path at once (TempName::kUnique): each has its own temp
// file, so interleaved writes never mix; the last rename wins, whole.
TEST_F(AtomicFileTest, UniqueTempsLetTwoWritersOfOnePathPublishWhole) {
  auto a = AtomicFile::Create(path_, TempName::kUnique);
  auto b = AtomicFile::Create(path_, TempName::kUnique);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->temp_path(), b->temp_path());
  EXPECT_EQ(a->temp_path().rfind(path_ + ".tmp.", 0), 0u) << a->temp_path();
  ASSERT_TRUE(a->Append(std::string(1 << 16, 'a')).ok());
  ASSERT_TRUE(b->Append(std::string(1 << 15, 'b')).ok());
  ASSERT_TRUE(a->Append(std::string(1 << 16, 'a')).ok());
  ASSERT_TRUE(a->Commit().ok());
  EXPECT_EQ(Slurp(path_), std::string(1 << 17, 'a'));
  ASSERT_TRUE(b->Commit().ok());
  EXPECT_EQ(Slurp(path_), std::string(1 << 15, 'b'));
  ASSERT_TRUE(WriteFileAtomically(path_, "c", TempName::kUnique).ok());
  EXPECT_EQ(Slurp(path_), "c");
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++entries;
  EXPECT_EQ(entries, 1);  // no temp file left
}

TEST_F(AtomicFileTest, ErrorsNameTheStepAndTheFile) {
  const std::string missing = (dir_ / "no" / "such" / "dir" / "f").string();
  const absl::Status s = WriteFileAtomically(missing, "x");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(std::string(s.message()).find("create " + missing + ".tmp"), std::string::npos) << s;
  // The target is a non-empty directory: the rename fails, the directory and
  // its content stay, no temp file is left behind.
  const std::string busy = (dir_ / "busy").string();
  fs::create_directories(busy);
  { std::ofstream(busy + "/inside") << "x"; }
  const absl::Status r = WriteFileAtomically(busy, "data");
  EXPECT_FALSE(r.ok());
  EXPECT_NE(std::string(r.message()).find("rename " + busy + ".tmp to " + busy), std::string::npos) << r;
  EXPECT_TRUE(fs::is_directory(busy));
  EXPECT_EQ(Slurp(busy + "/inside"), "x");
  EXPECT_FALSE(fs::exists(busy + ".tmp"));
}

}  // namespace
}  // namespace moe
