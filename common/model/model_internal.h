// Internals shared by the files of Model's forward pass (model.h): the batch
// segment and DSA top-k state, and two small numeric helpers. Only those
// files include it.
//   model.cc            numerics helpers, dense MLP, decoder layer, Forward / ForwardBatch
//   attention.cc        MLA attention: projections, cache append, explicit and absorbed cores
//   dsa_indexer.cc      the DSA lightning indexer (top-k key selection)
//   moe_routing.cc      the router (grouped top-k) and the routed-expert MoE block
//   router_lookahead.cc the next MoE layer's predicted experts (HintAhead)
//   mtp.cc              the MTP draft layer (MtpForward)
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "common/model/kv_cache.h"
#include "common/model/model.h"

namespace moe {

namespace model_detail {
// An f32 buffer left uninitialized, for scratch the code overwrites whole:
// std::vector zero-fills, and the attention core's scratch is megabytes a layer.
inline std::unique_ptr<float[]> UninitF32(int64_t n) { return std::unique_ptr<float[]>(new float[n]); }
}  // namespace model_detail

// Per-query selected key sets of the nearest preceding full indexer layer
// (empty `valid` = no indexer yet / dense causal attention).
struct Model::TopK {
  bool valid = false;
  std::vector<std::vector<int32_t>> keys;  // per row: sorted ascending key positions
};

struct Model::Seg {
  KvCache* cache = nullptr;
  int64_t row0 = 0;  // first row in the batch
  int64_t S = 0;     // rows
  bool prefill = false;  // BatchSeq::prefill
  TopK topk;
  // index_share_for_mtp_iteration (MtpForward's `share`): the indexer keeps its
  // keys but selects, for every row, these keys (the round's step-0 top-k) plus
  // every position after share_pos, instead of scoring.
  const std::vector<int32_t>* share = nullptr;
  int64_t share_pos = 0;
};

struct Model::Attended {
  std::vector<int64_t> slot;             // slot[t]: row of position t in lats / kpe (-1: not attended)
  int64_t used = 0;                      // rows of lats / kpe
  std::unique_ptr<float[]> lats, kpe;    // the attended latents (kv_lora_rank) and rope keys, f32
  // Row s's attended positions (ascending): its top-k up to its own position, or all of them.
  std::vector<int32_t> KeysOf(const Seg& seg, int64_t P0, int64_t s) const {
    std::vector<int32_t> keys;
    if (seg.topk.valid) {
      for (int32_t t : seg.topk.keys[s])
        if (t <= P0 + s) keys.push_back(t);
    } else {
      keys.resize(P0 + s + 1);
      std::iota(keys.begin(), keys.end(), 0);
    }
    return keys;
  }
};

struct ForwardPass::State {
  std::vector<BatchSeq> seqs;              // ids point into `ids`
  std::vector<std::vector<int32_t>> ids;   // copies: the caller's spans need not outlive the pass
  std::vector<Model::Seg> segs;
  std::vector<float> h;                    // rows x hidden
  int64_t S = 0;
  int next_layer = 0;
  int num_layers = 0;
  bool failed = false;
};

// Adds wall seconds to one StepProfile field while the profile is set.
class Model::Timed {
 public:
  Timed(const Model& m, double StepProfile::*field) : p_(m.profile_), field_(field) {
    if (p_) t0_ = std::chrono::steady_clock::now();
  }
  ~Timed() {
    if (p_) p_->*field_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  Timed(const Timed&) = delete;
  Timed& operator=(const Timed&) = delete;

 private:
  StepProfile* p_;
  double StepProfile::*field_;
  std::chrono::steady_clock::time_point t0_;
};

namespace model_detail {

inline float Silu(float x) { return x / (1.0f + std::exp(-x)); }

// Indices of the k largest values (ties: lower index first), in that order.
inline std::vector<int> TopKIdx(const float* v, int n, int k) {
  std::vector<int> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) {
    if (v[a] != v[b]) return v[a] > v[b];
    return a < b;
  });
  idx.resize(k);
  return idx;
}

// The positions TopKIdx(v, n, k) returns, as a set in ascending position
// order, in O(n): nth_element under the same strict order (value
// descending, then position ascending) leaves exactly that set in front.
// The DSA indexer's top-2,048 of up to 200K keys, where partial_sort's heap
// cost ~2 ms a layer at 32K keys.
inline std::vector<int32_t> TopKSetAscending(const float* v, int n, int k) {
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  if (k < n) {
    std::nth_element(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
      if (v[a] != v[b]) return v[a] > v[b];
      return a < b;
    });
    idx.resize(k);
  }
  std::sort(idx.begin(), idx.end());
  return idx;
}

}  // namespace model_detail
}  // namespace moe
