// Token sampling for one sequence: penalties, temperature, top-k, top-p,
// min-p, a per-sequence seeded RNG, and log-probabilities. The one sampler:
// inferd's batcher (the API) and the engine's Generate (`moe run`) both draw
// with it, so the same seed and parameters give the same tokens from the CLI
// and from the API (tests/serving/engine_stack_test.py).
//
// Order: logits -> presence/frequency penalties (over the sequence's
// generated tokens) -> temperature 0: argmax (first on ties) | else
// softmax(l / T) -> top_k -> top_p -> min_p -> renormalize -> draw with the
// sequence's RNG. Reported log-probabilities are log_softmax of the raw
// logits (before penalties and filters), as vLLM reports them.
// Determinism: the draw depends only on the logits, the parameters and the
// sequence's RNG state -- never on other sequences of the batch.
// Cost: O(V) per token plus O(V log V) only when top_p < 1 (V = 150k: ~2 ms).
// Seeding: Rng(seed) once per sequence; each sampled token (temperature > 0)
// takes one draw.
// Thread safety: pure functions; the Rng belongs to one sequence.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace moe {

struct SampleParams {
  float temperature = 1.0f;  // 0: greedy (argmax, first on ties)
  float top_p = 1.0f;
  int32_t top_k = 0;
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
};

struct SampleResult {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // best first
};

using Rng = std::mt19937_64;

// OK, or InvalidArgument naming the first parameter out of range (temperature
// >= 0, top_p in (0, 1], top_k >= 0, min_p in [0, 1], finite penalties).
absl::Status CheckSampleParams(const SampleParams& p);

// `counts`: how often each token was generated so far. `top_logprobs` < 0: none.
SampleResult Sample(std::span<const float> logits, const SampleParams& p,
                    const std::unordered_map<int32_t, int32_t>& counts, int32_t top_logprobs, Rng& rng);

}  // namespace moe
