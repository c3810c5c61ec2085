// Test double of an inference worker: emits the bytes of a script (or, with
// temperature > 0, letters drawn from an RNG seeded by the request's seed) as
// byte tokens (ByteCodec ids), one per `step_ms`, on its own thread. Counts
// steps so tests can check cancellation latency.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "services/gateway/byte_codec.h"
#include "services/gateway/worker.h"

namespace moe::gateway::testing {

class FakeWorker final : public Worker {
 public:
  FakeWorker(std::string name, std::string script, int step_ms = 1)
      : name_(std::move(name)), script_(std::move(script)), step_ms_(step_ms) {}

  const std::string& name() const override { return name_; }

  std::atomic<bool> fail_before_first_token{false};  // stream ends Unavailable before any token
  std::atomic<bool> fail_after_first_token{false};
  std::atomic<bool> healthy{true};
  std::atomic<int> started{0};
  std::atomic<int> steps_after_cancel{-1};  // of the last cancelled sequence
  std::atomic<int> cancels{0};
  std::atomic<int> finished{0};
  std::atomic<bool> emit_eos{true};
  std::atomic<int> last_prompt_len{0};
  std::atomic<int> tokens_emitted{0};
  std::atomic<int> vocab_size{0};  // reported by Health (0: not reported)

  absl::StatusOr<WorkerInfo> Health() override {
    if (!healthy) return absl::UnavailableError("fake worker down");
    WorkerInfo i;
    i.model = "fake";
    i.max_context = 4096;
    i.vocab_size = vocab_size;
    return i;
  }

  class Handle final : public SeqHandle {
   public:
    Handle(FakeWorker* w, GenerateParams p, SeqSink sink) : w_(w) {
      th_ = std::thread([this, p = std::move(p), sink = std::move(sink)]() mutable { Run(p, sink); });
    }
    ~Handle() override {
      Cancel();
      th_.join();
    }
    void Cancel() override { cancel_.store(true); }

   private:
    void Run(const GenerateParams& p, const SeqSink& sink) {
      w_->last_prompt_len = static_cast<int>(p.prompt.size());
      if (w_->fail_before_first_token) {
        SeqEvent e;
        e.kind = SeqEvent::kError;
        e.status = absl::UnavailableError("connection refused");
        sink(std::move(e));
        return;
      }
      std::mt19937_64 rng(p.sampling.has_seed ? p.sampling.seed : std::random_device{}());
      int produced = 0;
      int after_cancel = 0;
      bool counted = false;
      for (int step = 0;; ++step) {
        std::this_thread::sleep_for(std::chrono::milliseconds(w_->step_ms_));
        if (cancel_.load()) {  // checked once per step, like inferd
          if (!counted) {
            w_->steps_after_cancel = after_cancel;
            ++w_->cancels;
          }
          SeqEvent e;
          e.kind = SeqEvent::kFinish;
          e.finish = FinishReason::kCancelled;
          e.prompt_tokens = static_cast<int32_t>(p.prompt.size());
          e.completion_tokens = produced;
          sink(std::move(e));
          return;
        }
        (void)counted;
        if (produced >= p.max_tokens || (produced >= static_cast<int>(w_->script_.size()) &&
                                         p.sampling.temperature == 0.0f)) {
          bool eos = produced < p.max_tokens && w_->emit_eos;
          if (eos) {
            SeqEvent t;
            t.token = ByteCodec::kEos;
            sink(std::move(t));
            ++produced;
          }
          SeqEvent e;
          e.kind = SeqEvent::kFinish;
          e.finish = eos ? FinishReason::kStop : FinishReason::kLength;
          e.prompt_tokens = static_cast<int32_t>(p.prompt.size());
          e.completion_tokens = produced;
          ++w_->finished;
          sink(std::move(e));
          return;
        }
        if (w_->fail_after_first_token && produced == 1) {
          SeqEvent e;
          e.kind = SeqEvent::kError;
          e.status = absl::UnavailableError("worker died");
          sink(std::move(e));
          return;
        }
        SeqEvent t;
        t.token = p.sampling.temperature > 0.0f ? static_cast<int32_t>('a' + rng() % 26)
                                                 : static_cast<unsigned char>(w_->script_[produced]);
        t.logprob = -0.25f;
        for (int k = 0; k < p.logprobs; ++k) t.top.push_back({static_cast<int32_t>('a' + k), -1.0f - k});
        sink(std::move(t));
        ++w_->tokens_emitted;
        ++produced;
        if (cancel_.load()) ++after_cancel;
      }
    }
    FakeWorker* w_;
    std::atomic<bool> cancel_{false};
    std::thread th_;
  };

  std::unique_ptr<SeqHandle> Generate(GenerateParams params, SeqSink sink) override {
    ++started;
    return std::make_unique<Handle>(this, std::move(params), std::move(sink));
  }

 private:
  std::string name_;
  std::string script_;
  int step_ms_;
};

}  // namespace moe::gateway::testing
