// The prefix cache's disk tier (services/inferd/prefix_disk_tier.h) and the
// RAM cache over it (prefix_cache.h): files keyed by the exact token prefix and
// the model identity, the byte budget (least recently used first), damaged /
// truncated / other-version / other-model files refused with a warning naming
// the file and the cause, two writers of one directory, and a batcher that
// finds a previous batcher's sequences after a "restart".
#include "services/inferd/prefix_disk_tier.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "services/inferd/batcher.h"
#include "services/inferd/prefix_cache.h"
#include "tests/inferd/seq_collector.h"
#include "tests/inferd/toy_model.h"

namespace moe::inferd {
namespace {

namespace fs = std::filesystem;

constexpr char kModelA[] = "model A/1 weights:0001";
constexpr char kModelB[] = "model B/1 weights:0002";

class PrefixDiskTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("moe-prefix-disk-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<PrefixDiskTier> Open(const char* identity, int64_t max_bytes = int64_t{1} << 30) {
    auto t = PrefixDiskTier::Open(dir_, max_bytes, identity);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::move(*t) : nullptr;
  }
  // Sets a file's mtime `age_s` seconds into the past (eviction order without sleeping).
  void Age(const std::string& path, int age_s) {
    struct timespec ts[2];
    clock_gettime(CLOCK_REALTIME, &ts[0]);
    ts[0].tv_sec -= age_s;
    ts[1] = ts[0];
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), ts, 0), 0) << path;
  }
  int CountFiles(const std::string& suffix = ".kvp") {
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir_)) {
      const std::string name = e.path().filename().string();
      n += name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    }
    return n;
  }
  std::string dir_;
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void Spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

TEST_F(PrefixDiskTierTest, KeyedByTheExactPrefixAndTheModel) {
  auto a = Open(kModelA);
  const std::vector<int32_t> p = {1, 2, 3, 4};
  ASSERT_TRUE(a->Store(p, "state of 1 2 3 4").ok());
  // The longest common prefix, up to the limit (a hit never covers the whole prompt).
  auto c = a->FindLongest(std::vector<int32_t>{1, 2, 3, 4, 5}, 4);
  EXPECT_EQ(c.common, 4);
  EXPECT_EQ(c.tokens, p);
  EXPECT_EQ(c.path, dir_ + "/" + a->FileName(p));
  auto bytes = a->Read(c);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, "state of 1 2 3 4");
  EXPECT_EQ(a->FindLongest(std::vector<int32_t>{1, 2, 3, 4}, 3).common, 3);
  EXPECT_EQ(a->FindLongest(std::vector<int32_t>{1, 2, 9, 9}, 3).common, 2);
  EXPECT_EQ(a->FindLongest(std::vector<int32_t>{7, 1, 2}, 2).common, 0);
  // Another prefix is another file.
  EXPECT_NE(a->FileName(p), a->FileName(std::vector<int32_t>{1, 2, 3, 5}));
  // The same model in another process (a new tier on the directory) finds it...
  auto a2 = Open(kModelA);
  auto c2 = a2->FindLongest(std::vector<int32_t>{1, 2, 3, 4, 8}, 4);
  ASSERT_EQ(c2.common, 4);
  EXPECT_EQ(*a2->Read(c2), "state of 1 2 3 4");
  // ...another model does not, and does not even open it (no warning, nothing ignored).
  auto b = Open(kModelB);
  EXPECT_EQ(b->FindLongest(std::vector<int32_t>{1, 2, 3, 4, 8}, 4).common, 0);
  EXPECT_EQ(b->stats().ignored, 0);
  EXPECT_EQ(b->stats().files, 0);
  EXPECT_EQ(a2->stats().files, 1);
  EXPECT_EQ(a2->stats().reads, 1);
}

TEST_F(PrefixDiskTierTest, ALongerPrefixSupersedesItsPrefixesAndAStoredOneIsNotRewritten) {
  auto a = Open(kModelA);
  ASSERT_TRUE(a->Store(std::vector<int32_t>{1, 2}, "12").ok());
  ASSERT_TRUE(a->Store(std::vector<int32_t>{5, 6}, "56").ok());
  ASSERT_TRUE(a->Store(std::vector<int32_t>{1, 2, 3}, "123").ok());
  EXPECT_FALSE(fs::exists(dir_ + "/" + a->FileName(std::vector<int32_t>{1, 2})));
  EXPECT_EQ(CountFiles(), 2);
  EXPECT_EQ(a->stats().files, 2);
  auto c = a->FindLongest(std::vector<int32_t>{1, 2, 7}, 2);
  EXPECT_EQ(c.common, 2);
  EXPECT_EQ(*a->Read(c), "123");
  ASSERT_TRUE(a->Store(std::vector<int32_t>{1, 2, 3}, "123").ok());
  EXPECT_EQ(a->stats().writes, 3);  // the fourth store found the file there
}

TEST_F(PrefixDiskTierTest, TheBudgetEvictsTheLeastRecentlyUsedFilesOfEveryModel) {
  // Each file: 40 B header + identity (22 B) + 4 B per token + payload.
  const std::string payload(100, 'x');
  const int64_t file = 40 + 22 + 4 + 100;
  auto a = Open(kModelA, 3 * file);
  auto b = Open(kModelB, 3 * file);
  ASSERT_TRUE(a->Store(std::vector<int32_t>{1}, payload).ok());
  ASSERT_TRUE(b->Store(std::vector<int32_t>{2}, payload).ok());
  ASSERT_TRUE(a->Store(std::vector<int32_t>{3}, payload).ok());
  EXPECT_EQ(CountFiles(), 3);
  Age(dir_ + "/" + a->FileName(std::vector<int32_t>{1}), 300);
  Age(dir_ + "/" + b->FileName(std::vector<int32_t>{2}), 200);
  Age(dir_ + "/" + a->FileName(std::vector<int32_t>{3}), 100);
  // A hit makes {1} the most recently used.
  auto hit = a->FindLongest(std::vector<int32_t>{1, 9}, 1);
  ASSERT_EQ(hit.common, 1);
  ASSERT_TRUE(a->Read(hit).ok());
  ASSERT_TRUE(a->Store(std::vector<int32_t>{4}, payload).ok());
  // Over budget by one file: the oldest goes, whichever model it is (B's {2}).
  EXPECT_EQ(CountFiles(), 3);
  EXPECT_FALSE(fs::exists(dir_ + "/" + b->FileName(std::vector<int32_t>{2})));
  EXPECT_TRUE(fs::exists(dir_ + "/" + a->FileName(std::vector<int32_t>{1})));
  EXPECT_EQ(a->stats().evicted, 1);
  EXPECT_LE(a->stats().bytes, 3 * file);
  // A state larger than the whole budget is not written.
  ASSERT_TRUE(a->Store(std::vector<int32_t>{5}, std::string(4 * file, 'y')).ok());
  EXPECT_EQ(a->stats().too_large, 1);
  EXPECT_FALSE(fs::exists(dir_ + "/" + a->FileName(std::vector<int32_t>{5})));
  // A crashed writer's temp file is swept once stale; a live writer's stays.
  const std::string stale = dir_ + "/" + a->FileName(std::vector<int32_t>{6}) + ".tmp.999.0";
  const std::string live = dir_ + "/" + a->FileName(std::vector<int32_t>{7}) + ".tmp.999.1";
  Spit(stale, "half");
  Spit(live, "half");
  Age(stale, 7200);
  ASSERT_TRUE(a->Store(std::vector<int32_t>{8}, "z").ok());
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));
}

TEST_F(PrefixDiskTierTest, BadFilesAreIgnoredWithAWarningNamingTheFileAndTheCause) {
  auto writer = Open(kModelA);
  auto other = Open(kModelB);
  const std::vector<std::vector<int32_t>> keys = {{1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}, {6, 6}};
  for (const auto& k : keys) ASSERT_TRUE(writer->Store(k, std::string(64, 'p')).ok());
  auto path = [&](int i) { return dir_ + "/" + writer->FileName(keys[i]); };
  // 0: a flipped payload byte (found by the payload CRC when read).
  std::string f0 = Slurp(path(0));
  f0[f0.size() - 3] ^= 0x40;
  Spit(path(0), f0);
  // 1: truncated.
  fs::resize_file(path(1), fs::file_size(path(1)) - 10);
  // 2: another format version.
  std::string f2 = Slurp(path(2));
  f2[8] = 9;
  Spit(path(2), f2);
  // 3: written for model B, copied under model A's name.
  ASSERT_TRUE(other->Store(keys[3], std::string(64, 'p')).ok());
  fs::rename(dir_ + "/" + other->FileName(keys[3]), path(3));
  // 4: not a prefix-cache file at all.
  Spit(path(4), "garbage that is long enough to hold a header, but is no header at all.");
  // 5: a flipped token id (the header CRC).
  std::string f5 = Slurp(path(5));
  f5[40 + 22] ^= 1;
  Spit(path(5), f5);

  ::testing::internal::CaptureStderr();
  auto a = Open(kModelA);  // a new worker on the directory
  std::vector<PrefixDiskTier::Candidate> found;
  for (const auto& k : keys) {
    std::vector<int32_t> prompt = k;
    prompt.push_back(0);
    auto c = a->FindLongest(prompt, 2);
    if (c.common == 2) found.push_back(c);
  }
  // Only the damaged payload passes the header checks; reading it fails.
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].path, path(0));
  auto r = a->Read(found[0]);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  // Never used again: the next lookup does not offer it.
  EXPECT_EQ(a->FindLongest(std::vector<int32_t>{1, 1, 0}, 2).common, 0);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(a->stats().ignored, 6) << err;
  const std::vector<std::pair<int, std::string>> causes = {
      {0, "payload checksum mismatch"},  {1, "truncated"},
      {2, "prefix-cache file version 9"}, {3, "written for another model (model B"},
      {4, "not a moestream prefix-cache file (bad magic)"}, {5, "header checksum mismatch"}};
  for (const auto& [i, cause] : causes) {
    EXPECT_NE(err.find("ignoring " + path(i) + ": " + cause), std::string::npos) << i << " " << cause << "\n" << err;
  }
  // Damaged files are removed; another version's and another model's are left alone.
  for (int i : {0, 1, 4, 5}) EXPECT_FALSE(fs::exists(path(i))) << i;
  for (int i : {2, 3}) EXPECT_TRUE(fs::exists(path(i))) << i;
  // Warned once per file: another scan (a new directory state) says nothing new.
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(a->Store(std::vector<int32_t>{9}, "fine").ok());
  EXPECT_EQ(a->FindLongest(std::vector<int32_t>{2, 2, 0}, 2).common, 0);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  // A good file written again under an ignored name is used.
  ASSERT_TRUE(writer->Store(keys[1], "whole again").ok());
  auto again = Open(kModelA);
  auto c = again->FindLongest(std::vector<int32_t>{2, 2, 0}, 2);
  ASSERT_EQ(c.common, 2);
  EXPECT_EQ(*again->Read(c), "whole again");
}

TEST_F(PrefixDiskTierTest, ReadsDuringConcurrentWritesOfOneDirectoryNeverSeeAPartialFile) {
  auto w1 = Open(kModelA);
  auto w2 = Open(kModelA);
  auto reader = Open(kModelA);
  // Both writers store the same prefixes (same file names) with large payloads.
  auto payload = [](int i) { return std::string(200000 + i, static_cast<char>('a' + i % 26)); };
  std::atomic<bool> done{false};
  std::atomic<int> reads{0}, bad{0};
  std::thread r([&] {
    while (!done) {
      for (int i = 0; i < 8; ++i) {
        auto c = reader->FindLongest(std::vector<int32_t>{100, i, 0}, 2);
        if (c.common < 2) continue;
        auto b = reader->Read(c);
        if (b.ok()) {
          ++reads;
          if (*b != payload(i)) ++bad;
        } else if (!absl::IsNotFound(b.status())) {
          ++bad;
        }
      }
    }
  });
  auto write = [&](PrefixDiskTier* w) {
    for (int round = 0; round < 5; ++round)
      for (int i = 0; i < 8; ++i) EXPECT_TRUE(w->Store(std::vector<int32_t>{100, i}, payload(i)).ok());
  };
  std::thread t1(write, w1.get()), t2(write, w2.get());
  t1.join();
  t2.join();
  done = true;
  r.join();
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(reader->stats().ignored, 0);
  EXPECT_EQ(CountFiles(), 8);
  EXPECT_EQ(CountFiles(".tmp"), 0);
  for (int i = 0; i < 8; ++i) {
    auto c = reader->FindLongest(std::vector<int32_t>{100, i, 0}, 2);
    ASSERT_EQ(c.common, 2) << i;
    EXPECT_EQ(*reader->Read(c), payload(i));
  }
  (void)reads.load();
}

TEST_F(PrefixDiskTierTest, OpenRefusesABadDirectoryBudgetOrIdentity) {
  EXPECT_EQ(PrefixDiskTier::Open(dir_, 0, kModelA).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PrefixDiskTier::Open(dir_, 100, "").status().code(), absl::StatusCode::kInvalidArgument);
  Spit(dir_ + "-file", "x");
  auto st = PrefixDiskTier::Open(dir_ + "-file/sub", 100, kModelA).status();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find(dir_ + "-file/sub"), std::string::npos) << st;
  fs::remove(dir_ + "-file");
}

// ---- the RAM cache over the tier, through the batcher ------------------------

SeqRequest Greedy(const std::string& id, const std::string& text, int n) {
  SeqRequest r;
  r.id = id;
  for (unsigned char c : text) r.prompt.push_back(c);
  r.max_tokens = n;
  r.sampling.temperature = 0;
  return r;
}

TEST_F(PrefixDiskTierTest, ARestartedBatcherReusesTheSpilledPrefixAndAnswersTheSame) {
  const std::string text = "<|user|>\nwhat is the weather in Paris today?<|assistant|>\n";
  testing::SeqCollector first(std::chrono::seconds(30));
  {
    testing::ToyModel m;
    BatcherConfig bc;
    bc.prefix_disk = std::move(*PrefixDiskTier::Open(dir_, 1 << 20, *m.StateIdentity()));
    Batcher b(&m, bc);
    ASSERT_TRUE(b.Submit(Greedy("1", text, 20), first.Cb()).ok());
    first.Wait();
    EXPECT_EQ(first.fin.cached_prompt_tokens, 0);
  }  // destroyed: the spill is written
  EXPECT_EQ(CountFiles(), 1);
  testing::ToyModel m;  // a new process' model
  BatcherConfig bc;
  bc.prefix_disk = std::move(*PrefixDiskTier::Open(dir_, 1 << 20, *m.StateIdentity()));
  Batcher b(&m, bc);
  testing::SeqCollector again(std::chrono::seconds(30));
  ASSERT_TRUE(b.Submit(Greedy("2", text, 20), again.Cb()).ok());
  again.Wait();
  EXPECT_EQ(again.tokens, first.tokens);
  EXPECT_EQ(again.fin.cached_prompt_tokens, static_cast<int32_t>(text.size()) - 1);
  auto st = b.stats();
  EXPECT_EQ(st.prefix.disk_hits, 1);
  EXPECT_EQ(st.prefix.disk_hit_tokens, static_cast<int64_t>(text.size()) - 1);
  EXPECT_EQ(st.prefix.disk.ignored, 0);
  // A model with other scripts (another identity) shares nothing.
  testing::ToyConfig other;
  other.script = "Something else entirely.";
  testing::ToyModel m2(other);
  BatcherConfig bc2;
  bc2.prefix_disk = std::move(*PrefixDiskTier::Open(dir_, 1 << 20, *m2.StateIdentity()));
  Batcher b2(&m2, bc2);
  testing::SeqCollector foreign(std::chrono::seconds(30));
  ASSERT_TRUE(b2.Submit(Greedy("3", text, 20), foreign.Cb()).ok());
  foreign.Wait();
  EXPECT_EQ(foreign.fin.cached_prompt_tokens, 0);
}

TEST_F(PrefixDiskTierTest, AStateTheModelRefusesIsIgnoredAndThePromptIsPrefilled) {
  testing::ToyModel m;
  auto tier = std::shared_ptr<PrefixDiskTier>(std::move(*PrefixDiskTier::Open(dir_, 1 << 20, *m.StateIdentity())));
  // A well-framed file whose payload is no toy state (3 bytes).
  ASSERT_TRUE(tier->Store(std::vector<int32_t>{65, 66, 67}, "abc").ok());
  ::testing::internal::CaptureStderr();
  PrefixCache c(1 << 20, &m, tier);
  auto hit = c.Lookup({65, 66, 67, 68});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(hit.tokens, 0);
  EXPECT_NE(err.find("not a toy state"), std::string::npos) << err;
  EXPECT_EQ(tier->stats().ignored, 1);
  // Insert spills; FlushSpills waits for the writer.
  auto s = std::make_shared<testing::ToyState>();
  s->tokens = {70, 71, 72};
  c.Insert(s->tokens, s);
  c.FlushSpills();
  EXPECT_TRUE(fs::exists(dir_ + "/" + tier->FileName(s->tokens)));
  EXPECT_EQ(c.stats().disk.writes, 2);
}

}  // namespace
}  // namespace moe::inferd
