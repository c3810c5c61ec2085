// The prefix cache's disk tier: finished sequences' states (a model's
// serialized KV, SequenceModel::SerializeState) as files in one directory
// (`--prefix-cache-dir`), reused by any worker of the same model on the host:
// a new worker, a restarted stack, another inferd.
//
// Numbers: GLM-5's compressed KV is ~110 KB per token at bf16 (220 KB at
// f32): a returning 4K-token conversation is ~0.45-0.9 GB, read back at disk
// speed (~1.4 GB/s here: well under a second) instead of prefilling 4K tokens
// (minutes at a 2% expert cache). The directory holds at most `max_bytes`
// (`--prefix-cache-disk-bytes`) of files; past it the least recently used
// (file mtime: a hit touches its file) go first.
//
// Files: `<model>-<tokens>.kvp`, both parts 16 hex digits of FNV-1a
// (common/base/fnv1a.h) over the model identity (SequenceModel::
// state_identity) and over the exact token prefix the state holds. Layout
// (little-endian): Header, the identity's bytes, int32 tokens[num_tokens], the
// payload; the header carries CRC32C (masked) of header + identity + tokens and
// of the payload. A file is published whole (atomic_file.h, a temp of its own
// per writer: two workers storing the same prefix at once each rename a
// complete file), so a reader never sees a part of one.
//
// What is never used, with a warning naming the file and the cause (once per
// file version): a truncated or damaged file (then removed: files are only
// replaced whole, so it cannot heal), one of another format version, and one
// whose embedded identity is not this worker's (a file named for this model
// but written for another; these two are left for whoever wrote them). Files named for other models are theirs:
// not opened, but they count in the directory's budget (every worker of a
// directory should get the same budget).
//
// Index: this model's files' token lists, kept in memory and refreshed from
// the directory when it changed (its mtime) or every 2 s, so other workers'
// files are found; a lookup is a linear scan (like the RAM tier's).
// A stored prefix makes this model's files holding a proper prefix of it
// redundant: they are removed (the longer file serves those prompts too).
// Thread safety: thread-safe (the RAM tier's writer thread stores while the
// batcher thread looks up and reads).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace moe::inferd {

struct PrefixDiskStats {
  int64_t max_bytes = 0;
  int64_t bytes = 0;      // every prefix-cache file of the directory, as of the last store (or Open)
  int64_t files = 0;      // this model's files in the index
  int64_t writes = 0;     // files this tier published
  int64_t write_errors = 0;
  int64_t too_large = 0;  // states larger than the whole budget (not written)
  int64_t reads = 0;      // files read and verified (then handed to the model)
  int64_t ignored = 0;    // files refused: damaged, truncated, other version, other model
  int64_t evicted = 0;    // files this tier removed for the budget
};

class PrefixDiskTier {
 public:
  // Creates `dir` if needed; `identity` is the model's state_identity (not
  // empty). InvalidArgument for a bad budget or identity, the directory's
  // errno otherwise (naming it).
  static absl::StatusOr<std::unique_ptr<PrefixDiskTier>> Open(const std::string& dir, int64_t max_bytes,
                                                              std::string identity);

  // Publishes `payload` as the state of exactly `tokens`, then keeps the
  // directory within the budget. A prefix already stored is only touched.
  absl::Status Store(std::span<const int32_t> tokens, std::string_view payload);

  struct Candidate {
    std::string path;
    std::vector<int32_t> tokens;  // the file's whole prefix
    int64_t common = 0;           // tokens it shares with the prompt (0: no candidate)
  };
  // This model's file sharing the longest common prefix with `prompt`, counted
  // up to `limit` tokens.
  Candidate FindLongest(std::span<const int32_t> prompt, int64_t limit);
  // The candidate's payload, verified (and its file touched as recently
  // used). NotFound: the file is gone (another worker evicted it). Any other
  // error is a file never to be used: it was logged and is ignored from now on.
  absl::StatusOr<std::string> Read(const Candidate& c);
  // A verified file whose payload the model refused: logged and ignored.
  void Reject(const std::string& path, const absl::Status& why);

  PrefixDiskStats stats() const;
  const std::string& dir() const { return dir_; }
  const std::string& identity() const { return identity_; }
  // The file name a prefix of this model is stored under (tests).
  std::string FileName(std::span<const int32_t> tokens) const;

 private:
  PrefixDiskTier(std::string dir, int64_t max_bytes, std::string identity);
  struct Indexed {
    std::vector<int32_t> tokens;
    int64_t bytes = 0;
  };
  struct Seen {
    int64_t size = 0, mtime_ns = 0;
  };
  // Re-lists the directory when it changed or `force` (mu_ held).
  void ScanLocked(bool force);
  // Warns about `name` (once per size and mtime) and ignores it; a damaged
// one (DataLoss) is removed (mu_ held).
  void IgnoreLocked(const std::string& name, const Seen& seen, const absl::Status& why);
  // Removes the least recently used files while the directory holds more
  // than the budget, and stale temp files of crashed writers (mu_ held).
  void EnforceBudgetLocked(const std::string& keep);

  const std::string dir_;
  const int64_t max_bytes_;
  const std::string identity_;
  const std::string prefix_;  // "<model>-"
  mutable std::mutex mu_;
  std::map<std::string, Indexed> index_;  // file name -> its prefix
  std::map<std::string, Seen> ignored_;   // file name -> the version that was refused
  int64_t dir_mtime_ns_ = -1;
  int64_t last_scan_ns_ = 0;
  PrefixDiskStats stats_;
};

}  // namespace moe::inferd
