#include "services/gateway/metrics.h"

#include "prometheus/text_serializer.h"
#include "services/gateway/admission.h"
#include "services/gateway/sequence_placer.h"

namespace moe::gateway {

namespace {
const prometheus::Histogram::BucketBoundaries kLatencyBuckets = {
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0};
}

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  using namespace prometheus;
  ttft_ = &BuildHistogram()
               .Name("moe_time_to_first_token_seconds")
               .Help("Time from request admission to the first generated token")
               .Register(*registry_)
               .Add({}, kLatencyBuckets);
  itl_ = &BuildHistogram()
              .Name("moe_inter_token_latency_seconds")
              .Help("Time between consecutive tokens of one choice")
              .Register(*registry_)
              .Add({}, kLatencyBuckets);
  duration_ = &BuildHistogram()
                   .Name("moe_request_duration_seconds")
                   .Help("Whole request time by endpoint")
                   .Register(*registry_);
  requests_ = &BuildCounter().Name("moe_requests_total").Help("Requests by endpoint and HTTP status").Register(*registry_);
  tokens_ = &BuildCounter()
                 .Name("moe_generated_tokens_total")
                 .Help("Tokens generated for clients")
                 .Register(*registry_)
                 .Add({});
  cancelled_ = &BuildCounter()
                    .Name("moe_cancelled_sequences_total")
                    .Help("Sequences cancelled (client gone, stop string)")
                    .Register(*registry_)
                    .Add({});
  queue_ = &BuildGauge().Name("moe_queue_depth").Help("Requests waiting for a slot").Register(*registry_).Add({});
  running_ = &BuildGauge().Name("moe_running_requests").Help("Requests running").Register(*registry_).Add({});
  w_active_ = &BuildGauge().Name("moe_worker_active_sequences").Help("Sequences on each worker").Register(*registry_);
  w_up_ = &BuildGauge().Name("moe_worker_up").Help("1 when the worker is in rotation").Register(*registry_);
  w_tokens_ = &BuildGauge().Name("moe_worker_tokens_total").Help("Tokens streamed from each worker").Register(*registry_);
  w_tps_ = &BuildGauge()
                .Name("moe_worker_tokens_per_second")
                .Help("Tokens/s of each worker since the previous scrape")
                .Register(*registry_);
  w_hit_ = &BuildGauge()
                .Name("moe_worker_expert_hit_rate")
                .Help("Expert cache hit rate reported by each worker (expertd / in-process store)")
                .Register(*registry_);
  w_prefix_ = &BuildGauge()
                   .Name("moe_worker_prefix_cache_hit_tokens")
                   .Help("Prompt tokens served from the prefix KV cache, per worker")
                   .Register(*registry_);
  w_steps_ = &BuildGauge().Name("moe_worker_steps").Help("Engine steps run by each worker").Register(*registry_);
  w_fetches_ = &BuildGauge()
                    .Name("moe_worker_expert_fetches")
                    .Help("Routed-expert fetches of each worker (one per distinct expert per layer per step)")
                    .Register(*registry_);
  w_cancel_late_ = &BuildGauge()
                        .Name("moe_worker_max_steps_after_cancel")
                        .Help("Most steps a cancelled sequence took part in after its cancel (0 = in time)")
                        .Register(*registry_);
}

void Metrics::ObserveRequest(const std::string& endpoint, int http_status, double seconds) {
  requests_->Add({{"endpoint", endpoint}, {"code", std::to_string(http_status)}}).Increment();
  duration_->Add({{"endpoint", endpoint}}, kLatencyBuckets).Observe(seconds);
}

std::string Metrics::Render(const AdmissionController* admission, const SequencePlacer* placer) {
  if (admission) {
    queue_->Set(admission->queued());
    running_->Set(admission->running());
  }
  if (placer) {
    auto now = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& w : placer->Snapshot()) {
      prometheus::Labels l{{"worker", w.name}};
      w_active_->Add(l).Set(w.active);
      w_up_->Add(l).Set(w.alive ? 1 : 0);
      w_tokens_->Add(l).Set(static_cast<double>(w.tokens_generated));
      w_hit_->Add(l).Set(w.info.expert_hit_rate);
      w_prefix_->Add(l).Set(static_cast<double>(w.info.prefix_cache_hit_tokens));
      w_steps_->Add(l).Set(static_cast<double>(w.info.steps));
      w_fetches_->Add(l).Set(static_cast<double>(w.info.expert_fetches));
      w_cancel_late_->Add(l).Set(static_cast<double>(w.info.max_steps_after_cancel));
      Rate& r = rates_[w.name];
      double dt = std::chrono::duration<double>(now - r.at).count();
      if (r.at.time_since_epoch().count() != 0 && dt > 0.05) {
        r.tps = static_cast<double>(w.tokens_generated - r.tokens) / dt;
      }
      if (r.at.time_since_epoch().count() == 0 || dt > 0.05) {
        r.tokens = w.tokens_generated;
        r.at = now;
      }
      w_tps_->Add(l).Set(r.tps);
    }
  }
  prometheus::TextSerializer ser;
  return ser.Serialize(registry_->Collect());
}

}  // namespace moe::gateway
