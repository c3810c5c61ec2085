#include "services/gateway/vocab_check.h"

#include "absl/strings/str_cat.h"

namespace moe::gateway {

absl::Status CheckTokenizerFitsWorker(const std::string& tokenizer, int64_t tokenizer_vocab, const std::string& worker,
                                      int64_t worker_vocab) {
  if (worker_vocab <= 0 || worker_vocab >= tokenizer_vocab) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "the tokenizer (", tokenizer, ") has ", tokenizer_vocab, " token ids but worker ", worker,
      " serves a model with vocab_size ", worker_vocab, ": ids ", worker_vocab, "..", tokenizer_vocab - 1,
      " have no embedding row; use the model's own tokenizer (--tokenizer DIR)"));
}

absl::Status CheckTokenizerFitsWorkers(const std::string& tokenizer, int64_t tokenizer_vocab,
                                       const std::vector<WorkerSnapshot>& workers) {
  for (const auto& w : workers) {
    if (!w.alive) continue;
    if (absl::Status s = CheckTokenizerFitsWorker(tokenizer, tokenizer_vocab, w.name, w.info.vocab_size); !s.ok())
      return s;
  }
  return absl::OkStatus();
}

}  // namespace moe::gateway
