// Making the serving plan (common/format/serving_plan.h): how a model is laid
// out in a RAM budget, computed once (`moe plan`) and applied by every process
// that serves it. docs/PLAN.md is the prose version.
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
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/format/serving_plan.h"
#include "common/model/kv_cache.h"
#include "common/model/pass_memory.h"

namespace moe {

struct PlanRequest {
  std::string model_dir;      // container (or HF checkpoint: the plan then picks the conversion policy)
  uint64_t ram_bytes = 0;     // RAM for every serving process together (required)
  int64_t context = -1;       // KV tokens per worker (all its sequences); -1: min(kDefaultContext, what fits)
  int workers = 1;            // inferd processes (or 1 for moe run)
  bool expertd = false;       // routed experts in one expertd shared by the workers (else in-process, per worker)
  KvDtype kv_dtype = KvDtype::kF32;
  IndexKeys index_keys = IndexKeys::kAuto;  // resolved against the stored kv_b (kv_cache.h)
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
  // Per worker: the activations of one layer-major prefill pass (planned
  // prefill, common/model/pass_memory.h); the plan says how many prompt rows
  // a pass holds. 512 MiB: ~1,360 rows at GLM-5's dimensions, so a 1K-token
  // prompt reads each routed expert once. Capped at the rows of the context
  // (or kDefaultContext): a small model's pass needs far less.
  uint64_t prefill_pass_bytes = kDefaultPrefillPassBytes;
  uint64_t reserve_bytes = 512ull << 20;
};

inline constexpr int64_t kDefaultContext = 8192;

// Plans `r.model_dir` in r.ram_bytes. For a container the formats are its
// stored ones; for a checkpoint the plan tries the dense-int8 policy, then
// dense-int4, and records the one that fits as `policy`. ResourceExhausted
// naming the part when nothing fits: the resident set alone, the KV of the
// requested context, or the minimum expert cache (two layers' top-k per worker).
absl::StatusOr<ServingPlan> MakeServingPlan(const PlanRequest& r);

}  // namespace moe
