// The identity of an engine's KV states (SequenceModel::state_identity): a
// string naming everything the KV values of a prompt depend on, so that a
// prefix-cache file (prefix_disk_tier.h) written by one worker is used by
// another exactly when it would have computed the same values itself.
//
// It holds: the config.json bytes' CRC32C; the weights' content - for a
// converted container the stored CRC32C of every tensor and expert record
// (metadata only, no weight read), for an HF checkpoint the CRC32C of every
// shard's bytes (one read of the checkpoint at start; ~14 MB for the demo
// models, which is why containers are the serving form); and the options that
// change KV values or layout: numerics, attention path, kernel path and ISA,
// re-stored expert / dense formats, KV dtype and index-key format.
// Not in it (they never change the answer): budgets, placement, expertd, MTP.
// Not in it either: the moestream build; a build that changes numerics must be
// given a fresh --prefix-cache-dir (docs/SERVING.md).
// Thread safety: reads files; no shared state.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/model/engine.h"

namespace moe::inferd {

// The weights' part alone ("container:<crc>/<n>t/<n>r" or "checkpoint:..."): an
// ownership map names its model by it (services/peer/ownership_map.h).
absl::StatusOr<std::string> WeightsIdentity(const std::string& model_dir);

// `weights` is WeightsIdentity(model_dir), computed once by the caller (an HF
// checkpoint's costs a read of every shard).
absl::StatusOr<std::string> EngineStateIdentity(const std::string& model_dir, const std::string& weights,
                                                const EngineConfig& cfg, const Engine& engine);

}  // namespace moe::inferd
