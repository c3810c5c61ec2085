// The gateway's tokenizer must fit every worker's model.
//
// A tokenizer with more ids than the model's vocab_size (e.g. the project
// tokenizer's 12,288 ids in front of an oracle model of 384) produces ids the
// model has no embedding row for: every request would fail (or worse, a
// smaller vocabulary that happens to cover the prompt would produce noise).
// The gateway refuses to start then, naming both numbers and the worker; a
// worker that comes up later with such a model is kept out of rotation.
// A tokenizer with FEWER ids than the model is fine (padded vocabularies).
// The byte codec (test models, token-id prompts) only warns.
// Thread safety: pure function.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "services/gateway/sequence_placer.h"

namespace moe::gateway {

// FailedPrecondition naming the tokenizer, its id count, the worker and its
// vocab_size for the first live worker that reported a smaller vocabulary
// than `tokenizer_vocab`; OK otherwise (workers that did not report one, or
// are not live, are not judged).
absl::Status CheckTokenizerFitsWorkers(const std::string& tokenizer, int64_t tokenizer_vocab,
                                       const std::vector<WorkerSnapshot>& workers);
// The same check for one worker (vocab_size <= 0: not reported, OK); the
// gateway installs it as the placer's admission for workers that come up
// after start, which then stay out of rotation with this message.
absl::Status CheckTokenizerFitsWorker(const std::string& tokenizer, int64_t tokenizer_vocab, const std::string& worker,
                                      int64_t worker_vocab);

}  // namespace moe::gateway
