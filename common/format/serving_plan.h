// The serving plan as data: what `moe plan` decided for a model in a RAM
// budget (common/model/serving_planner.h computes it; docs/PLAN.md), written
// as JSON (`moe plan --out FILE`) and applied by every process that serves
// the model: moe run, inferd and expertd take --plan FILE, moe convert takes
// the policy of a checkpoint's plan.
//
// Bytes: "shared" are container tensors mapped read-only (page cache, one
// copy for all processes), "private" copies made at load (per worker). The
// embedding table is mapped but not resident: a token reads one row.
// Thread safety: plain data; functions are pure.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace moe {

struct PlanPart {  // one role of the resident set
  std::string formats;  // e.g. "q8_g128" or "q4_g64+f32"
  int64_t bytes = 0;
  int64_t per_token_bytes = 0;  // read per decode token
  int tensors = 0;
};

struct ServingPlan {
  // The model.
  std::string model_dir, model_type, kind;  // kind: "container" or "checkpoint"
  std::string container_plan_id;            // the container's conversion plan id ("" for checkpoints)
  std::string policy;                       // stored formats (container) or the policy to convert with
  int num_layers = 0, moe_layers = 0, top_k = 0, experts_per_layer = 0;
  // The request.
  uint64_t ram_bytes = 0;
  int workers = 1;
  bool expertd = false;
  std::string kv_dtype = "f32";  // "f32" or "bf16" (KvDtype)
  std::string index_keys = "exact";  // DSA index keys in the KV: "exact" (kv_dtype) or "q8" (IndexKeys)
  bool load_mtp = true;
  // Resident set.
  std::map<std::string, PlanPart> resident;  // by role (census groups: attention, indexer, ..., mtp)
  int64_t shared_bytes = 0;                  // mapped container tensors, once for all processes
  int64_t private_bytes = 0;                 // copies made at load, per worker
  int64_t embedding_bytes = 0;               // mapped, not resident: one row per token is read
  int64_t embedding_row_bytes = 0;
  // KV.
  int64_t kv_bytes_per_token = 0;
  int64_t context = 0;      // planned KV tokens per worker
  int64_t context_max = 0;  // the most that fits (with the minimum expert cache), capped at the model's
  int64_t max_position_embeddings = 0;
  // Routed experts.
  int64_t expert_record_bytes = 0;  // one expert as stored
  int64_t expert_records = 0;       // of the layers decode uses (MTP excluded)
  int64_t expert_cache_bytes = 0;   // expertd --budget, or the in-process store per worker
  int64_t expert_cache_min_bytes = 0;
  double hit_rate = 0;
  std::string hit_rate_source;  // "uniform" or the popularity source
  // Overheads.
  int64_t overhead_bytes = 0;  // processes + reserve + every worker's prefill pass
  // Planned prefill (docs/SERVING.md): per worker, the activation bytes of
  // one layer-major pass, one prompt row's share, and the rows that fit
  // (inferd's pass size). 0 in plans written before it existed.
  int64_t prefill_pass_bytes = 0, prefill_row_bytes = 0, prefill_pass_rows = 0;
  // Per decode token at batch 1, at the planned context.
  int64_t ram_bytes_per_token = 0;   // resident + KV + cached experts
  int64_t kv_read_bytes_per_token = 0;
  int64_t expert_ram_bytes_per_token = 0;
  int64_t disk_bytes_per_token = 0;
  double mem_gbps = 0, disk_gbps = 0;
  bool bandwidth_measured = false;
  double floor_tokens_per_second = 0;         // RAM and disk reads overlapped
  double floor_serial_tokens_per_second = 0;  // one after the other

  int64_t TotalBytes() const;  // everything the plan places in RAM
  std::string ToText() const;
  std::string ToJson() const;
};

// A plan written by ToJson, checked against the model it is applied to
// (same directory contents: model type, container plan id, layer count).
absl::StatusOr<ServingPlan> LoadServingPlan(const std::string& path);
absl::StatusOr<ServingPlan> ParseServingPlan(const std::string& json_text, const std::string& source);
absl::Status CheckPlanMatchesModel(const ServingPlan& p, const std::string& model_dir);
// The conversion plan id in a container's manifest ("" for a checkpoint).
std::string ContainerPlanId(const std::string& model_dir);

}  // namespace moe
