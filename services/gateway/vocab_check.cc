#include "services/gateway/vocab_check.h"

#include "absl/strings/str_cat.h"

namespace moe::gateway {

absl::Status CheckTokenizerFitsWorkers(const std::string& tokenizer, int64_t tokenizer_vocab,
                                       const std::vector<WorkerSnapshot>& workers) {
  for (const auto& w : workers) {
    if (!w.alive || w.info.vocab_size <= 0 || w.info.vocab_size >= tokenizer_vocab) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        "the tokenizer (", tokenizer, ") has ", tokenizer_vocab, " token ids but worker ", w.name,
        " serves a model with vocab_size ", w.info.vocab_size, ": ids ", w.info.vocab_size, "..",
        tokenizer_vocab - 1, " have no embedding row; use the model's own tokenizer (--tokenizer DIR)"));
  }
  return absl::OkStatus();
}

}  // namespace moe::gateway
