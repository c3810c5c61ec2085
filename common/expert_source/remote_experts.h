// RemoteExperts: routed experts computed on the host that owns them (expert
// parallelism across hosts, docs/MULTIHOST.md).
//
// Moving a 21 MB GLM-5 expert costs ~900x the bytes of sending the 12 KB row
// that needs it to the host that holds it and getting its 12 KB output back,
// so decode sends activations to experts. The engine (Model::Moe) asks Place
// for each routed expert of a layer, Starts one call with the layer's input
// rows for the kRemote ones, computes its own experts meanwhile,
// and then combines every (row, slot) output itself in slot order. A remote
// output is R(expert(x)) exactly as this host would compute it (same weights,
// numerics and kernels: the hosts' identities must match), so the result is
// bit-identical to one host whatever the ownership map or arrival order.
// A job whose owner fails, times out or refuses comes back empty and the
// engine computes it from its own expert source (the fallback: slower, never
// wrong). This header sits below the engine and the transport (services/peer).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "common/expert_source/expert_source.h"

namespace moe {

struct RemoteExpertJob {
  int expert = 0;
  std::vector<int64_t> rows;  // indices into the layer's [S, H] input, ascending
};

class RemoteExpertCall {
 public:
  virtual ~RemoteExpertCall() = default;
  // Blocks until every owner answered, failed or passed its deadline. One
  // entry per job: the outputs [rows x H], or empty when the job must run here.
  virtual std::vector<std::vector<float>> Wait() = 0;
};

class RemoteExperts {
 public:
  virtual ~RemoteExperts() = default;
  // Where (layer, expert), used by `rows` rows of this step, is computed:
  //  kLocal - here from this host's source: it owns or replicates it, its
  //    owner is suspect (recent failures), or the rows' activations would
  //    outweigh the expert's bytes (a long prefill chunk: the weights move
  //    instead, from this host's own copy);
  //  kRemote - on its owner (Start);
  //  kFetch - here, with the weights fetched from its owner (FetchWeights):
  //    the rows outweigh the record and the group is set to move weights
  //    over the network rather than read them from this host's disk.
  // Any thread.
  enum class Placement { kLocal, kRemote, kFetch };
  virtual Placement Place(int layer, int expert, int64_t rows) const = 0;
  // The owner's stored weights of (layer, expert) (kFetch), or an error:
  // the caller then reads them from its own source (the fallback).
  virtual absl::StatusOr<ExpertLease> FetchWeights(int layer, int expert) = 0;
  // Starts the calls for `jobs` (kRemote experts of one layer; x is the
  // layer's MoE input [S, H], f32) and returns at once; x and jobs must stay
  // valid until Wait returns.
  virtual std::unique_ptr<RemoteExpertCall> Start(int layer, const float* x, int64_t S, int64_t H,
                                                  std::span<const RemoteExpertJob> jobs) = 0;
};

}  // namespace moe
