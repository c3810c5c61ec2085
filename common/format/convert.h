// `moe convert`: a Hugging Face FP8 (e4m3 + 128x128 block scales) or BF16
// checkpoint -> a moestream container (docs/CONTAINER.md), one input shard
// at a time.
//
// Problem in numbers: GLM-5-FP8 is ~756 GB in ~140 shards; the container is
// ~390 GB. The machine has 24 GiB of RAM and maybe room for one input shard
// plus the output, so: output shard k holds what input shard k completes
// (a routed expert whose matrices span shards goes to the shard holding its
// last matrix or scale), memory stays at one tensor row-slab or one expert,
// and with --delete-source input shard j is removed as soon as every output
// that reads from it is durable.
//
// Zero experts stay holes: a routed expert whose source bytes are all zero
// (file holes of a `moe synth` stand-in, found with SEEK_DATA without reading
// them) is stored as an all-zero record that is never written, so it stays a
// hole in the output too (all-zero codes and scales decode to the zero
// matrix, exactly what the input holds). Its CRCs are those of zeros.
//
// Crash safety and resume: the plan (every output tensor, its format and
// sources) is computed from the input headers once and stored atomically as
// DIR/convert-plan.json before anything else; each output shard is written
// to "<name>.tmp", fsynced, renamed and the directory fsynced; a later run
// with the same arguments loads the plan, verifies each finished shard
// (header + plan id, and with verify_full every CRC32C) and converts only
// what is missing. The manifest moestream.json is written last: its presence
// means the container is complete.
//
// Thread safety: one conversion per output directory; the function uses
// OpenMP threads internally.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/format/tensor_role.h"

namespace moe {

inline constexpr std::string_view kPlanFileName = "convert-plan.json";

struct ConvertProgress {
  int shard = 0;        // 1-based output shard being written
  int num_shards = 0;
  uint64_t bytes_done = 0;   // input bytes converted in this run (zero experts excluded)
  uint64_t bytes_total = 0;  // input bytes this run will convert (zero experts excluded)
  double elapsed_s = 0;
  bool shard_finished = false;  // set once per shard, after it is durable
  double shard_seconds = 0;     // that shard's conversion time
};

// One output shard written in this run.
struct ConvertShardStat {
  std::string file;
  uint64_t bytes_in = 0;       // input tensor bytes it converted (zero experts included)
  uint64_t bytes_out = 0;      // file size
  uint64_t bytes_written = 0;  // bytes actually written (zero experts stay holes)
  int records = 0, zero_records = 0;
  double seconds = 0;
  int64_t peak_rss_bytes = 0;  // process peak RSS after the shard
};

struct ConvertOptions {
  std::string in_dir;
  std::string out_dir;
  ConvertPolicy policy;
  bool delete_source = false;
  bool verify_full = true;  // on resume, recompute CRCs of finished shards
  int max_shards = -1;      // stop after writing this many shards (-1: all)
  std::function<void(const ConvertProgress&)> progress;  // may be empty
  // Called before an output shard is converted with the input files (names
  // in in_dir) it reads, before they are checked: `moe synth --container`
  // writes its inputs just in time. With it the input data is not scanned
  // for zero experts up front (the files may not hold it yet). May be empty.
  std::function<absl::Status(const std::vector<std::string>& inputs)> prepare_inputs;
};

struct ConvertResult {
  int num_shards = 0;
  int shards_written = 0;
  int shards_verified = 0;  // finished in an earlier run and verified
  uint64_t bytes_in = 0;    // input tensor bytes converted in this run
  uint64_t bytes_out = 0;   // output bytes written in this run
  double seconds = 0;
  bool complete = false;    // manifest written
  std::vector<std::string> deleted;  // input shards removed
  std::vector<ConvertShardStat> shards;  // written in this run, in order
  int64_t peak_rss_bytes = 0;  // process peak RSS at the end
};

absl::StatusOr<ConvertResult> ConvertCheckpoint(const ConvertOptions& options);

}  // namespace moe
