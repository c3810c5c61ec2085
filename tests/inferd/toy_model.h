// A deterministic test model for the serving stack (NOT a language model):
// byte-level vocabulary (ids 0..255 = bytes, 256 = EOS, like the gateway's
// ByteCodec). Its "KV state" is the token list. The logits of the next
// token favour (by +6) the next byte of a script, counted from the last
// "<|assistant|>\n" in the context (or from position 0), then EOS; every
// letter gets a context-hashed offset in [0, 2) so sampling with different
// seeds gives different text while greedy decoding is exact. Scripts: a tool
// call when the context offers tools ("<|tools|>"), a final answer when it
// holds a tool result ("<|tool|>"), else a plain sentence.
// Cost model: each Forward sleeps step_us + row_us per fed token, to stand
// in for compute in latency tests. Batch-invariant by construction.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/base/fnv1a.h"
#include "services/inferd/sequence_model.h"

namespace moe::inferd::testing {

class ToyState final : public SeqState {
 public:
  std::vector<int32_t> tokens;
  int64_t length() const override { return static_cast<int64_t>(tokens.size()); }
  int64_t bytes() const override { return static_cast<int64_t>(tokens.size()) * 4 + 64; }
};

struct ToyConfig {
  int64_t max_context = 4096;
  int64_t step_us = 0;
  int64_t row_us = 0;
  int64_t kv_budget_bytes = 0;  // a serving plan's KV budget (SequenceModel::kv_budget_bytes)
  int64_t kv_bytes_per_token = 4;
  std::string script = "The quick brown fox jumps over the lazy dog.";
  std::string tool_script = "<tool_call>get_weather {\"city\": \"Paris\"}</tool_call>";
  std::string answer_script = "It is sunny in Paris.";
};

class ToyModel final : public SequenceModel {
 public:
  static constexpr int32_t kEos = 256;
  explicit ToyModel(ToyConfig c = {}) : c_(std::move(c)) {}

  std::string name() const override { return "toy-byte"; }
  int32_t vocab_size() const override { return 257; }
  int64_t max_context() const override { return c_.max_context; }
  int64_t kv_budget_bytes() const override { return c_.kv_budget_bytes; }
  int64_t kv_bytes_per_token() const override { return c_.kv_bytes_per_token; }
  std::unique_ptr<SeqState> NewState() override { return std::make_unique<ToyState>(); }
  absl::StatusOr<std::unique_ptr<SeqState>> Clone(const SeqState& s, int64_t n) override {
    const auto& src = static_cast<const ToyState&>(s);
    if (n < 0 || n > src.length()) return absl::InvalidArgumentError("clone beyond the state");
    auto out = std::make_unique<ToyState>();
    out->tokens.assign(src.tokens.begin(), src.tokens.begin() + n);
    return out;
  }

  absl::Status Forward(std::span<Item> items) override {
    int64_t rows = 0;
    for (auto& it : items) {
      auto* st = static_cast<ToyState*>(it.state);
      for (int32_t t : it.tokens) {
        if (t < 0 || t >= vocab_size()) return absl::InvalidArgumentError(absl::StrCat("token ", t));
        st->tokens.push_back(t);
      }
      if (static_cast<int64_t>(st->tokens.size()) > c_.max_context) {
        return absl::OutOfRangeError("toy model: context exceeded");
      }
      rows += static_cast<int64_t>(it.tokens.size());
      ++forwards_;
      if (it.logits) {
        // Row r of the last logit_rows: the context up to and including it.
        const int64_t R = std::min<int64_t>(it.logit_rows, static_cast<int64_t>(it.tokens.size()));
        for (int64_t r = 0; r < R; ++r) {
          const std::vector<int32_t> ctx(st->tokens.begin(), st->tokens.end() - (R - 1 - r));
          Logits(ctx, it.logits + r * vocab_size());
        }
      }
    }
    int64_t us = c_.step_us + c_.row_us * rows;
    if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
    return absl::OkStatus();
  }

  // Persistence (the prefix cache's disk tier): a state is its token list,
  // 4 bytes each; the identity covers the scripts the logits follow.
  absl::StatusOr<std::string> StateIdentity() const override {
    Fnv1a64 h;
    for (const std::string* s : {&c_.script, &c_.tool_script, &c_.answer_script}) {
      h.U64(s->size());
      h.Bytes(*s);
    }
    return absl::StrCat(name(), "/1 scripts:", absl::Hex(h.value()));
  }
  absl::StatusOr<std::string> SerializeState(const SeqState& s) const override {
    const auto& t = static_cast<const ToyState&>(s).tokens;
    return std::string(reinterpret_cast<const char*>(t.data()), t.size() * 4);
  }
  absl::StatusOr<std::unique_ptr<SeqState>> ParseState(std::string_view bytes,
                                                       const std::string& label) const override {
    if (bytes.size() % 4 != 0) return absl::DataLossError(absl::StrCat(label, ": not a toy state"));
    auto out = std::make_unique<ToyState>();
    out->tokens.resize(bytes.size() / 4);
    if (!bytes.empty()) std::memcpy(out->tokens.data(), bytes.data(), bytes.size());
    for (int32_t t : out->tokens)
      if (t < 0 || t >= vocab_size()) return absl::DataLossError(absl::StrCat(label, ": token ", t));
    return out;
  }

  int64_t forwards() const { return forwards_; }
  bool can_rollback() const override { return true; }
  absl::Status Truncate(SeqState& s, int64_t n) override {
    auto& st = static_cast<ToyState&>(s);
    if (n < 0 || n > st.length()) return absl::InvalidArgumentError("truncate beyond the state");
    st.tokens.resize(n);
    return absl::OkStatus();
  }

 private:
  static size_t RFind(const std::vector<int32_t>& t, std::string_view pat) {
    if (t.size() < pat.size()) return std::string::npos;
    for (size_t i = t.size() - pat.size() + 1; i-- > 0;) {
      bool ok = true;
      for (size_t k = 0; k < pat.size() && ok; ++k) ok = t[i + k] == static_cast<unsigned char>(pat[k]);
      if (ok) return i;
    }
    return std::string::npos;
  }

  void Logits(const std::vector<int32_t>& t, float* out) const {
    size_t a = RFind(t, "<|assistant|>\n");
    size_t start = a == std::string::npos ? 0 : a + 14;
    const std::string* script = &c_.script;
    if (RFind(t, "<|tool|>\n") != std::string::npos) {
      script = &c_.answer_script;
    } else if (RFind(t, "<|tools|>\n") != std::string::npos) {
      script = &c_.tool_script;
    }
    size_t j = t.size() - start;
    int32_t target = j < script->size() ? static_cast<unsigned char>((*script)[j]) : kEos;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = t.size() >= 8 ? t.size() - 8 : 0; i < t.size(); ++i) h = (h ^ static_cast<uint32_t>(t[i])) * 1099511628211ull;
    for (int32_t v = 0; v < 257; ++v) out[v] = -4.0f;
    for (int32_t v = 'a'; v <= 'z'; ++v) {
      uint64_t x = (h ^ static_cast<uint64_t>(v) * 0x9E3779B97F4A7C15ull) * 0xBF58476D1CE4E5B9ull;
      out[v] = static_cast<float>((x >> 40) & 0xFFFF) / 32768.0f;  // [0, 2)
    }
    out[target] += 6.0f;
  }

  ToyConfig c_;
  int64_t forwards_ = 0;
};

}  // namespace moe::inferd::testing
