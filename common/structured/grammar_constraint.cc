#include "common/structured/grammar_constraint.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "common/base/fnv1a.h"
#include "common/base/status.h"
#include "common/structured/grammar_build.h"

namespace moe::structured {
namespace {

DLTensor MaskTensor(std::span<uint32_t> words, int64_t* shape) {
  DLTensor t{};
  t.data = words.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = xgrammar::GetBitmaskDLType();
  *shape = static_cast<int64_t>(words.size());
  t.shape = shape;
  t.strides = nullptr;
  t.byte_offset = 0;
  return t;
}

class GrammarConstraint final : public TokenConstraint {
 public:
  GrammarConstraint(xgrammar::GrammarMatcher m, int32_t vocab) : m_(std::move(m)), vocab_(vocab) {}

  int32_t vocab_size() const override { return vocab_; }

  bool FillMask(std::span<uint32_t> mask) override {
    int64_t shape = 0;
    DLTensor t = MaskTensor(mask, &shape);
    return m_.FillNextTokenBitmask(&t);
  }

  absl::Status Accept(int32_t token) override {
    if (token < 0 || token >= vocab_) return absl::InvalidArgumentError(absl::StrCat("token ", token, " out of range"));
    if (m_.IsTerminated()) return absl::InvalidArgumentError("the constrained output is already complete");
    if (!m_.AcceptToken(token)) {
      return absl::InvalidArgumentError(absl::StrCat("token ", token, " is not legal here"));
    }
    ++accepted_;
    return absl::OkStatus();
  }

  void Rollback(int n) override {
    if (n <= 0) return;
    m_.Rollback(n);
    accepted_ -= n;
  }

  int64_t accepted() const override { return accepted_; }
  bool Terminated() const override { return m_.IsTerminated(); }

  int32_t ForcedToken() override {
    std::vector<uint32_t> mask(MaskWords(vocab_));
    FillMask(mask);
    int32_t found = -1;
    for (size_t w = 0; w < mask.size(); ++w) {
      uint32_t bits = mask[w];
      if (!bits) continue;
      if (found >= 0 || (bits & (bits - 1))) return -1;
      found = static_cast<int32_t>(w * 32 + __builtin_ctz(bits));
    }
    return found < vocab_ ? found : -1;
  }

  int FillDraftMasks(std::span<const int32_t> drafts, std::span<uint32_t> masks) override {
    const size_t words = MaskWords(vocab_);
    int filled = 0, taken = 0;
    for (size_t i = 0; i <= drafts.size(); ++i) {
      std::span<uint32_t> m = masks.subspan(i * words, words);
      FillMask(m);
      ++filled;
      if (i == drafts.size()) break;
      const int32_t d = drafts[i];
      if (d < 0 || d >= vocab_ || !MaskAllows(m, d) || !Accept(d).ok()) break;
      ++taken;
    }
    Rollback(taken);
    return filled;
  }

 private:
  xgrammar::GrammarMatcher m_;
  const int32_t vocab_;
  int64_t accepted_ = 0;
};

}  // namespace

struct ConstraintCompiler::Impl {
  std::vector<int32_t> stop_ids;
  std::unique_ptr<xgrammar::TokenizerInfo> info;
  std::unique_ptr<xgrammar::GrammarCompiler> compiler;
};

ConstraintCompiler::~ConstraintCompiler() = default;

uint64_t VocabFingerprint(const std::vector<std::string>& token_texts) {
  Fnv1a64 h;  // over (length, bytes) of each text
  h.U64(token_texts.size());
  for (const auto& t : token_texts) {
    h.U64(t.size());
    h.Bytes(t);
  }
  return h.value();
}

absl::StatusOr<std::unique_ptr<ConstraintCompiler>> ConstraintCompiler::Create(std::vector<std::string> token_texts,
                                                                               std::vector<int32_t> stop_ids,
                                                                               int32_t model_vocab, int threads) {
  if (token_texts.empty()) return absl::InvalidArgumentError("constraint compiler: empty vocabulary");
  if (model_vocab < static_cast<int32_t>(token_texts.size())) {
    return absl::InvalidArgumentError(absl::StrCat("constraint compiler: model vocabulary ", model_vocab,
                                                   " is smaller than the tokenizer's ", token_texts.size()));
  }
  for (int32_t id : stop_ids) {
    if (id < 0 || id >= static_cast<int32_t>(token_texts.size())) {
      return absl::InvalidArgumentError(absl::StrCat("constraint compiler: stop id ", id, " outside the vocabulary"));
    }
  }
  auto c = std::unique_ptr<ConstraintCompiler>(new ConstraintCompiler());
  c->fingerprint_ = VocabFingerprint(token_texts);
  c->model_vocab_ = model_vocab;
  c->impl_ = std::make_unique<Impl>();
  c->impl_->stop_ids = stop_ids;
  try {
    c->impl_->info = std::make_unique<xgrammar::TokenizerInfo>(token_texts, xgrammar::VocabType::RAW, model_vocab,
                                                               stop_ids, /*add_prefix_space=*/false);
    c->impl_->compiler = std::make_unique<xgrammar::GrammarCompiler>(*c->impl_->info, threads, /*cache_enabled=*/true,
                                                                     /*max_memory_bytes=*/int64_t{256} << 20);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("constraint compiler: ", e.what()));
  }
  return c;
}

absl::StatusOr<std::unique_ptr<TokenConstraint>> ConstraintCompiler::NewConstraint(const ConstraintSpec& spec,
                                                                                   const std::vector<int32_t>& stop_ids,
                                                                                   CompileInfo* info) {
  for (int32_t id : stop_ids) {
    if (id < 0 || id >= model_vocab_) {
      return absl::InvalidArgumentError(absl::StrCat("stop token id ", id, " outside the vocabulary"));
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  try {
    std::optional<xgrammar::CompiledGrammar> compiled;
    if (spec.kind == ConstraintSpec::Kind::kLark) {
      MOE_ASSIGN_OR_RETURN(xgrammar::Grammar g, BuildGrammar(spec));
      compiled = impl_->compiler->CompileGrammar(g);
    } else {
      MOE_ASSIGN_OR_RETURN(std::string tag, BuildStructuralTag(spec));
      // Validate first (a clear message), then compile through the cache keyed by the tag.
      MOE_ASSIGN_OR_RETURN(xgrammar::Grammar g, BuildGrammar(spec));
      (void)g;
      compiled = impl_->compiler->CompileStructuralTag(tag);
    }
    if (info) {
      info->compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      info->grammar_bytes = static_cast<int64_t>(compiled->MemorySizeBytes());
    }
    std::optional<std::vector<int>> stops;
    if (!stop_ids.empty()) stops = std::vector<int>(stop_ids.begin(), stop_ids.end());
    xgrammar::GrammarMatcher m(*compiled, stops, /*terminate_without_stop_token=*/false);
    return std::unique_ptr<TokenConstraint>(std::make_unique<GrammarConstraint>(std::move(m), model_vocab_));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("structured output: ", e.what()));
  }
}

}  // namespace moe::structured
