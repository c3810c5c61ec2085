// Token sampling for one sequence: penalties, temperature, top-k, top-p,
// min-p, a per-sequence seeded RNG, and log-probabilities. The one sampler:
// inferd's batcher (the API) and the engine's Generate (`moe run`) both draw
// with it, so the same seed and parameters give the same tokens from the CLI
// and from the API (tests/serving/engine_stack_test.py).
//
// Order: logits -> repetition penalty (HF/vLLM: over prompt + generated
// tokens, a positive logit divided by it, a negative one multiplied) ->
// presence/frequency penalties (over the generated tokens) -> logit_bias ->
// the allowed mask (structured outputs; token_constraint.h) and banned ids
// (stop ids before min_tokens) set to -inf -> temperature 0: argmax (first on
// ties) | else softmax(l / T) -> top_k -> top_p -> min_p -> renormalize ->
// draw with the sequence's RNG. Reported log-probabilities are log_softmax of
// the raw logits (before penalties, bias, masks and filters), as vLLM's
// default raw_logprobs mode reports them.
// A mask that leaves no token legal is the caller's bug: Sample then draws
// from the mask alone (the constraint wins over banned ids and bias).
// Determinism: the draw depends only on the logits, the parameters and the
// sequence's RNG state -- never on other sequences of the batch.
// Cost: O(V) per token plus O(V log V) only when top_p < 1 (V = 150k: ~2 ms).
// Seeding: keyed draws - the token at output index i draws from
// KeyedRng(seed, i), never from a stream shared with earlier tokens, so a
// seeded sequence gives the same tokens whether it speculates or not and
// however many drafts were rejected (docs/SERVING.md, "Speculative decoding").
// Thread safety: pure functions; the Rng belongs to one sequence.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/sampling/token_constraint.h"

namespace moe {

struct SampleParams {
  float temperature = 1.0f;  // 0: greedy (argmax, first on ties)
  float top_p = 1.0f;
  int32_t top_k = 0;
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;  // 1 = off; > 0
};

// Per-draw inputs beyond the parameters; every member optional (empty = none).
struct SampleOptions {
  // Structured outputs: MaskWords(V) words, bit set = legal (token_constraint.h).
  std::span<const uint32_t> allowed;
  // Ids that may not be drawn now (stop ids before min_tokens); ignored when the
  // allowed mask would leave nothing else.
  std::span<const int32_t> banned;
  // OpenAI logit_bias: added to the logit of each id (after penalties).
  std::span<const std::pair<int32_t, float>> logit_bias;
  // Repetition penalty: ids seen in the prompt or the output (any order, repeats fine).
  std::span<const int32_t> seen;
};

struct SampleResult {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // best first
};

using Rng = std::mt19937_64;

// The generator of output index `index` of a sequence seeded `seed`
// (splitmix64 of both: independent streams per index).
Rng KeyedRng(uint64_t seed, int64_t index);

// OK, or InvalidArgument naming the first parameter out of range (temperature
// >= 0, top_p in (0, 1], top_k >= 0, min_p in [0, 1], finite penalties,
// repetition_penalty > 0).
absl::Status CheckSampleParams(const SampleParams& p);

// `counts`: how often each token was generated so far. `top_logprobs` < 0: none.
SampleResult Sample(std::span<const float> logits, const SampleParams& p,
                    const std::unordered_map<int32_t, int32_t>& counts, int32_t top_logprobs, Rng& rng,
                    const SampleOptions& opt = {});

}  // namespace moe
