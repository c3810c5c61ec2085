// Atomic publish: the one way a file is written in place of an old one.
//
// Steps: write PATH.tmp, fsync it, rename it over PATH, fsync the directory.
// A reader - or the next run after a crash or power loss at any point - sees
// either the old file or the complete new one, never a part of it; a crash
// before the rename leaves at most a stale PATH.tmp beside the intact old file
// (the next publish truncates it). Without the fsyncs a crash after the rename
// could leave an empty or partial file under the new name.
//
// Errors name the step and the file and keep errno's meaning:
// ResourceExhausted when the disk is full, NotFound when the directory is
// missing, Unavailable otherwise. On any error the old file is untouched and
// the temp file is removed.
//
// Used by: the KV cache writer (common/model/kv_cache.cc), the converter's
// shards and manifests (common/format/convert.cc), the expert manifest
// (common/expertstore/record_locator.cc), the heat file
// (common/expertstore/policy.cc), routing traces (common/expertstore/
// routing_trace.cc), `moe heat --png` (tools/moe/cmd_heat_png.cc).
// Tested by tests/base/atomic_file_test.cc (a process killed between write and
// rename leaves the old file intact).
// Two writers of one path (threads or processes publishing the same file,
// e.g. the prefix cache's content-addressed files, services/inferd/
// prefix_disk_tier.h) must each write their own temp file: with
// TempName::kUnique the temp is PATH.tmp.<pid>.<n>, so the last rename wins
// whole; a crash then leaves that writer's own temp, which the caller sweeps.
// With the default TempName::kFixed two concurrent writers would share
// PATH.tmp and could publish a mix.
// Thread safety: an AtomicFile belongs to one thread; distinct paths are
// independent.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace moe {

enum class TempName { kFixed, kUnique };

// Writes `bytes` as the new content of `path` (created with mode 0644).
absl::Status WriteFileAtomically(const std::string& path, std::string_view bytes,
                                 TempName temp = TempName::kFixed);

// The same for writers that stream or write at offsets: Create opens
// PATH.tmp (truncated), the caller writes through Append / PWrite or fd() (it
// may also open temp_path() itself, e.g. with O_DIRECT), and Commit publishes.
// Destroyed without a successful Commit, it removes the temp file.
class AtomicFile {
 public:
  static absl::StatusOr<AtomicFile> Create(const std::string& path, TempName temp = TempName::kFixed);
  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&& other) noexcept;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_; }
  int fd() const { return fd_; }

  // Writes all of `bytes` at the current offset / at `offset`.
  absl::Status Append(std::string_view bytes);
  absl::Status PWrite(const void* data, uint64_t n, uint64_t offset);
  // fsync, close, rename over path(), fsync the directory. Once only.
  absl::Status Commit();

 private:
  AtomicFile(std::string path, std::string temp, int fd) : path_(std::move(path)), temp_(std::move(temp)), fd_(fd) {}
  void Abandon();

  std::string path_, temp_;
  int fd_ = -1;
  bool committed_ = false;
};

// An errno (taken now) as a Status naming what failed on which file.
absl::Status ErrnoStatus(std::string_view what, const std::string& path);

}  // namespace moe
