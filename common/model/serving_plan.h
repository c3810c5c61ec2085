// The serving plan: how a model is laid out in a RAM budget, computed once
// (`moe plan`) and applied by every process that serves it (moe run, inferd,
// expertd; moe convert takes its policy). docs/PLAN.md is the prose version.
//
// Problem in numbers (GLM-5 on a 24 GiB machine): routed experts are ~390 GB
// at int4 and live on disk; the resident set is ~19.7 GB at int8 dense
// (~10.7 GB at int4), the KV cache 110-220 KB per token, so RAM decides
// three things that trade against each other: the resident formats, the
// context, and the expert cache (hence how many bytes each token reads from
// disk). Getting it wrong means an OOM kill mid-decode; so the plan counts
// every byte the loaders will allocate (walking the loader itself, like
// Engine::Plan), says which bytes are shared page cache (container tensors
// mapped read-only: one copy for all workers) and which are per process, and
// refuses what does not fit, naming the part.
//
// Per-token traffic at batch 1: every resident matrix is read once per
// decode token except the embedding (one row: it need not be resident) and
// the MTP layer (only when drafting); KV reads grow with the context (DSA:
// every indexer key, at most index_topk latents); routed experts come from
// the cache (RAM) or the disk. The floor is tokens/s if RAM and disk reads
// overlapped perfectly at the measured bandwidths.
//
// Thread safety: pure functions of their arguments (and the model files).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/format/convert.h"
#include "common/model/kv_cache.h"

namespace moe {

struct PlanRequest {
  std::string model_dir;      // container (or HF checkpoint: the plan then picks the conversion policy)
  uint64_t ram_bytes = 0;     // RAM for every serving process together (required)
  int64_t context = -1;       // KV tokens per worker (all its sequences); -1: min(kDefaultContext, what fits)
  int workers = 1;            // inferd processes (or 1 for moe run)
  bool expertd = false;       // routed experts in one expertd shared by the workers (else in-process, per worker)
  KvDtype kv_dtype = KvDtype::kF32;
  bool load_mtp = true;
  // Memory read and disk read bandwidth (GB/s, 1e9); 0: measured now
  // (memory: 2 threads over 512 MiB; disk: O_DIRECT reads of the model's own
  // resident bytes, never holes).
  double mem_gbps = 0, disk_gbps = 0;
  // Share of routed-expert uses that go to each (layer, expert), any order
  // (from a recorded routing trace); empty: uniform (the cache's hit rate is
  // then its share of all experts: a lower bound with skewed routing).
  std::vector<double> expert_popularity;
  std::string popularity_source;  // e.g. the trace's path, for the report
  // Per process: code, heaps, threads, activations, page tables (measured
  // for GLM-5: docs/PLAN.md); and for the machine: what must stay free.
  uint64_t process_overhead_bytes = 384ull << 20;
  uint64_t reserve_bytes = 512ull << 20;
};

inline constexpr int64_t kDefaultContext = 8192;

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
  KvDtype kv_dtype = KvDtype::kF32;
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
  int64_t overhead_bytes = 0;  // processes + reserve
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

// Plans `r.model_dir` in r.ram_bytes. For a container the formats are its
// stored ones; for a checkpoint the plan tries the dense-int8 policy, then
// dense-int4, and records the one that fits as `policy`. ResourceExhausted
// naming the part when nothing fits: the resident set alone, the KV of the
// requested context, or the minimum expert cache (two layers' top-k per worker).
absl::StatusOr<ServingPlan> MakeServingPlan(const PlanRequest& r);

// A plan written by ToJson, checked against the model it is applied to
// (same directory contents: model type, container plan id, layer count).
absl::StatusOr<ServingPlan> LoadServingPlan(const std::string& path);
absl::StatusOr<ServingPlan> ParseServingPlan(const std::string& json_text, const std::string& source);
absl::Status CheckPlanMatchesModel(const ServingPlan& p, const std::string& model_dir);

}  // namespace moe
