// Structured outputs on a worker: compiles ConstraintSpecs against the worker's vocabulary
// (xgrammar GrammarCompiler, with its cache: a schema seen before compiles for free) and
// makes the per-sequence TokenConstraint (common/sampling/token_constraint.h) the batcher
// masks and advances.
//
// Vocabulary: token_texts[id] = the bytes the token contributes to the output text as the
// gateway's detokenizer shows it to the output parser ("" for a token that never appears in
// text: special tokens other than the chat format's markers; those can never be drawn under
// a constraint). stop_ids (the default; each request names its own) end the output (legal only once the grammar is complete).
// model_vocab >= token_texts.size(): ids beyond the tokenizer (embedding padding) are never
// legal. The gateway and the worker must agree on the texts: VocabFingerprint over them is
// sent with every constrained request and a mismatch is refused (FailedPrecondition).
// Compile cost: ~10-30 ms per new schema at 155k tokens; the mask of one step 2-15 us
// (docs/BENCHMARKS.md `## structured`). Compile runs on the caller's thread (inferd: the
// request's gRPC thread, never the batcher loop).
// Thread safety: Compile may be called from many threads; each TokenConstraint belongs to
// one sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/sampling/token_constraint.h"
#include "common/structured/constraint_spec.h"

namespace moe::structured {

// Over the texts only: stop ids travel with each request (the matcher ends on those).
uint64_t VocabFingerprint(const std::vector<std::string>& token_texts);

struct CompileInfo {
  double compile_ms = 0;  // 0 when the compiler's cache had it
  int64_t grammar_bytes = 0;
};

class ConstraintCompiler {
 public:
  static absl::StatusOr<std::unique_ptr<ConstraintCompiler>> Create(std::vector<std::string> token_texts,
                                                                    std::vector<int32_t> stop_ids, int32_t model_vocab,
                                                                    int threads = 2);
  ~ConstraintCompiler();

  uint64_t fingerprint() const { return fingerprint_; }
  int32_t vocab_size() const { return model_vocab_; }

  // A fresh constraint at the start of the output. `stop_ids`: the request's stop tokens
  // (empty: the vocabulary's). InvalidArgument for a spec the matcher refuses.
  absl::StatusOr<std::unique_ptr<TokenConstraint>> NewConstraint(const ConstraintSpec& spec,
                                                                 const std::vector<int32_t>& stop_ids,
                                                                 CompileInfo* info = nullptr);

 private:
  struct Impl;
  ConstraintCompiler() = default;
  std::unique_ptr<Impl> impl_;
  uint64_t fingerprint_ = 0;
  int32_t model_vocab_ = 0;
};

}  // namespace moe::structured
