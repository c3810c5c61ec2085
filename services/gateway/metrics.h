// Prometheus metrics of the gateway, served on GET /metrics in the text exposition format
// (prometheus-cpp's registry + TextSerializer; no second HTTP server). Every series has a
// `model` label (the served model name).
//
//   moe_time_to_first_token_seconds        histogram  request admission -> first token
//   moe_inter_token_latency_seconds        histogram  between tokens of one choice
//   moe_request_duration_seconds{endpoint} histogram  whole request
//   moe_requests_total{endpoint,code}      counter
//   moe_prompt_tokens_total                counter    prompt tokens of requests that ran
//   moe_generated_tokens_total             counter    tokens generated for clients
//   moe_request_finish_total{reason}       counter    choices by finish reason (stop, length,
//                                                     tool_calls, or the error code)
//   moe_cancelled_sequences_total          counter    client disconnects, stop strings
//   moe_queue_depth / moe_running_requests gauges     (admission)
//   per worker {worker}:
//     moe_worker_up, moe_worker_active_sequences, moe_worker_tokens_per_second,
//     moe_worker_expert_hit_rate, moe_worker_max_steps_after_cancel,
//     moe_worker_kv_cache_bytes, moe_worker_prefix_cache_bytes,
//     moe_worker_prefix_cache_capacity_bytes, moe_worker_prefix_cache_usage (0..1)  gauges;
//     moe_worker_tokens_total, moe_worker_steps_total, moe_worker_expert_fetches_total,
//     moe_worker_prefix_cache_hit_tokens_total, moe_worker_prefix_cache_lookups_total,
//     moe_worker_spec_decode_steps_total, moe_worker_spec_decode_tokens_total,
//     moe_worker_spec_drafted_total, moe_worker_spec_accepted_total,
//     moe_worker_spec_{plain,verify}_step_{seconds,tokens}_total (the verify cost: pure decode steps'
//     loop time and tokens, plain and with drafts), moe_worker_spec_guard_blocks_total,
//     moe_worker_prefix_disk_hit_tokens_total, moe_worker_prefix_disk_ignored_total,
//     moe_worker_prefill_passes_total, moe_worker_prefill_pass_rows_total,
//     moe_worker_peer_{remote_jobs,fallback_jobs,failed_calls,bytes_sent,bytes_received,served_jobs,
//     refused_calls}_total (expert parallelism across hosts)
//     counters; moe_worker_waiting_sequences, moe_worker_prefix_disk_bytes,
//     moe_worker_prefix_disk_capacity_bytes, moe_worker_prefix_disk_files,
//     moe_worker_prefill_pass_capacity_rows, moe_worker_prefill_max_slice_seconds gauges; moe_worker_spec_tokens_per_step and moe_worker_spec_acceptance{position}
//     (accepted / drafted at each draft position, over the worker's life) gauges (the workers report running totals; the gateway adds what each probe
//     moved on, and a worker's restart does not make them go back).
// Thread safety: all methods are thread-safe (prometheus-cpp metrics are; Render locks).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace moe::gateway {

class AdmissionController;
class SequencePlacer;

class Metrics {
 public:
  explicit Metrics(const std::string& model = "moestream");
  void ObserveTtft(double seconds) { ttft_->Observe(seconds); }
  void ObserveItl(double seconds) { itl_->Observe(seconds); }
  void ObserveRequest(const std::string& endpoint, int http_status, double seconds);
  void AddTokens(int64_t n) { tokens_->Increment(static_cast<double>(n)); }
  void AddPromptTokens(int64_t n) { prompt_tokens_->Increment(static_cast<double>(n)); }
  void AddFinish(const std::string& reason) { finish_->Add({{"reason", reason}}).Increment(); }
  void AddCancelled() { cancelled_->Increment(); }

  // Samples gauges from the admission controller and placer, then serializes the registry.
  std::string Render(const AdmissionController* admission, const SequencePlacer* placer);

 private:
  using Counters = prometheus::Family<prometheus::Counter>;
  using Gauges = prometheus::Family<prometheus::Gauge>;
  // Adds to a per-worker counter what a reported running total moved on since last time.
  void Advance(Counters* family, const std::string& worker, int64_t total, double scale = 1.0);

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Histogram* ttft_;
  prometheus::Histogram* itl_;
  prometheus::Family<prometheus::Histogram>* duration_;
  Counters* requests_;
  Counters* finish_;
  prometheus::Counter* tokens_;
  prometheus::Counter* prompt_tokens_;
  prometheus::Counter* cancelled_;
  prometheus::Gauge* queue_;
  prometheus::Gauge* running_;
  Gauges* w_active_;
  Gauges* w_up_;
  Gauges* w_tps_;
  Gauges* w_hit_;
  Gauges* w_cancel_late_;
  Gauges* w_kv_;
  Gauges* w_prefix_bytes_;
  Gauges* w_prefix_cap_;
  Gauges* w_prefix_use_;
  Gauges* w_spec_tps_;
  Gauges* w_spec_accept_;
  Counters* w_spec_steps_;
  Counters* w_spec_tokens_;
  Counters* w_spec_drafted_;
  Counters* w_spec_accepted_;
  Counters* w_spec_plain_s_;
  Counters* w_spec_plain_tokens_;
  Counters* w_spec_verify_s_;
  Counters* w_spec_verify_tokens_;
  Counters* w_spec_guard_blocks_;
  Gauges* w_waiting_;
  Gauges* w_disk_bytes_;
  Gauges* w_disk_cap_;
  Gauges* w_disk_files_;
  Gauges* w_pass_cap_;
  Gauges* w_pass_slice_;
  Counters* w_disk_hits_;
  Counters* w_disk_ignored_;
  Counters* w_passes_;
  Counters* w_pass_rows_;
  Counters* w_tokens_;
  Counters* w_steps_;
  Counters* w_fetches_;
  Counters* w_prefix_hits_;
  Counters* w_peer_remote_;
  Counters* w_peer_fallback_;
  Counters* w_peer_failed_;
  Counters* w_peer_sent_;
  Counters* w_peer_received_;
  Counters* w_peer_served_;
  Counters* w_peer_refused_;
  Counters* w_prefix_lookups_;

  std::mutex mu_;  // rates and the last reported totals
  struct Rate {
    int64_t tokens = 0;
    std::chrono::steady_clock::time_point at;
    double tps = 0.0;
  };
  std::map<std::string, Rate> rates_;
  std::map<std::pair<const Counters*, std::string>, int64_t> last_total_;
};

}  // namespace moe::gateway
