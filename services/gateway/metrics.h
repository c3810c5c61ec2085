// Prometheus metrics of the gateway, served on GET /metrics in the text
// exposition format (prometheus-cpp's registry + TextSerializer; no second
// HTTP server).
//
//   moe_time_to_first_token_seconds     histogram  request start -> first token
//   moe_inter_token_latency_seconds     histogram  between tokens of one choice
//   moe_request_duration_seconds        histogram  whole request
//   moe_requests_total{endpoint,code}   counter
//   moe_generated_tokens_total          counter
//   moe_queue_depth / moe_running_requests   gauges (admission)
//   moe_worker_active_sequences{worker}, moe_worker_up{worker},
//   moe_worker_tokens_total{worker}, moe_worker_tokens_per_second{worker},
//   moe_worker_expert_hit_rate{worker}, moe_worker_prefix_cache_hit_tokens{worker}
//   moe_worker_steps{worker}, moe_worker_max_steps_after_cancel{worker},
//   moe_worker_expert_fetches{worker} (from the worker's Stats)
//   moe_cancelled_sequences_total       counter (client disconnects, stops)
// Thread safety: all methods are thread-safe (prometheus-cpp metrics are).
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
  Metrics();
  void ObserveTtft(double seconds) { ttft_->Observe(seconds); }
  void ObserveItl(double seconds) { itl_->Observe(seconds); }
  void ObserveRequest(const std::string& endpoint, int http_status, double seconds);
  void AddTokens(int64_t n) { tokens_->Increment(static_cast<double>(n)); }
  void AddCancelled() { cancelled_->Increment(); }

  // Samples gauges from the admission controller and placer, then
  // serializes the registry.
  std::string Render(const AdmissionController* admission, const SequencePlacer* placer);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Histogram* ttft_;
  prometheus::Histogram* itl_;
  prometheus::Family<prometheus::Histogram>* duration_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Counter* tokens_;
  prometheus::Counter* cancelled_;
  prometheus::Gauge* queue_;
  prometheus::Gauge* running_;
  prometheus::Family<prometheus::Gauge>* w_active_;
  prometheus::Family<prometheus::Gauge>* w_up_;
  prometheus::Family<prometheus::Gauge>* w_tokens_;
  prometheus::Family<prometheus::Gauge>* w_tps_;
  prometheus::Family<prometheus::Gauge>* w_hit_;
  prometheus::Family<prometheus::Gauge>* w_prefix_;
  prometheus::Family<prometheus::Gauge>* w_steps_;
  prometheus::Family<prometheus::Gauge>* w_fetches_;
  prometheus::Family<prometheus::Gauge>* w_cancel_late_;

  std::mutex mu_;  // rate computation state
  struct Rate {
    int64_t tokens = 0;
    std::chrono::steady_clock::time_point at;
    double tps = 0.0;
  };
  std::map<std::string, Rate> rates_;
};

}  // namespace moe::gateway
