#include "services/gateway/metrics.h"

#include "prometheus/text_serializer.h"
#include "services/gateway/admission.h"
#include "services/gateway/sequence_placer.h"

namespace moe::gateway {

namespace {
const prometheus::Histogram::BucketBoundaries kLatencyBuckets = {
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0};
}

Metrics::Metrics(const std::string& model) : registry_(std::make_shared<prometheus::Registry>()) {
  using namespace prometheus;
  const Labels m{{"model", model}};
  auto counter = [&](const char* name, const char* help) {
    return &BuildCounter().Name(name).Help(help).Labels(m).Register(*registry_);
  };
  auto gauge = [&](const char* name, const char* help) {
    return &BuildGauge().Name(name).Help(help).Labels(m).Register(*registry_);
  };
  auto histogram = [&](const char* name, const char* help) {
    return &BuildHistogram().Name(name).Help(help).Labels(m).Register(*registry_);
  };
  ttft_ = &histogram("moe_time_to_first_token_seconds", "Time from request admission to the first generated token")
               ->Add({}, kLatencyBuckets);
  itl_ = &histogram("moe_inter_token_latency_seconds", "Time between consecutive tokens of one choice")
              ->Add({}, kLatencyBuckets);
  duration_ = histogram("moe_request_duration_seconds", "Whole request time by endpoint");
  requests_ = counter("moe_requests_total", "Requests by endpoint and HTTP status");
  finish_ = counter("moe_request_finish_total", "Choices by finish reason");
  tokens_ = &counter("moe_generated_tokens_total", "Tokens generated for clients")->Add({});
  prompt_tokens_ = &counter("moe_prompt_tokens_total", "Prompt tokens of the requests that ran")->Add({});
  cancelled_ = &counter("moe_cancelled_sequences_total", "Sequences cancelled (client gone, stop string)")->Add({});
  queue_ = &gauge("moe_queue_depth", "Requests waiting for a slot")->Add({});
  running_ = &gauge("moe_running_requests", "Requests running")->Add({});
  w_active_ = gauge("moe_worker_active_sequences", "Sequences on each worker");
  w_up_ = gauge("moe_worker_up", "1 when the worker is in rotation");
  w_tps_ = gauge("moe_worker_tokens_per_second", "Tokens/s of each worker since the previous scrape");
  w_hit_ = gauge("moe_worker_expert_hit_rate", "Expert cache hit rate reported by each worker (expertd / in-process)");
  w_cancel_late_ = gauge("moe_worker_max_steps_after_cancel",
                         "Most steps a cancelled sequence took part in after its cancel (0 = in time)");
  w_kv_ = gauge("moe_worker_kv_cache_bytes", "KV cache memory of each worker's live sequences");
  w_prefix_bytes_ = gauge("moe_worker_prefix_cache_bytes", "KV of finished sequences kept for prefix reuse");
  w_prefix_cap_ = gauge("moe_worker_prefix_cache_capacity_bytes", "Bound of the prefix cache (--prefix-cache-bytes)");
  w_prefix_use_ = gauge("moe_worker_prefix_cache_usage", "Prefix cache bytes over its capacity (0..1)");
  w_spec_tps_ = gauge("moe_worker_spec_tokens_per_step",
                      "Speculative decoding: tokens per decode step of each worker (1 = no draft accepted)");
  w_spec_accept_ = gauge("moe_worker_spec_acceptance",
                         "Speculative decoding: accepted / drafted at each draft position (0 = first draft)");
  w_spec_steps_ = counter("moe_worker_spec_decode_steps_total", "Decode steps (plain or verify) of each worker");
  w_spec_tokens_ = counter("moe_worker_spec_decode_tokens_total", "Tokens those decode steps produced");
  w_spec_drafted_ = counter("moe_worker_spec_drafted_total", "Draft tokens verified by each worker");
  w_spec_accepted_ = counter("moe_worker_spec_accepted_total", "Draft tokens accepted by each worker");
  w_spec_plain_s_ = counter("moe_worker_spec_plain_step_seconds_total",
                            "Speculative decoding: loop time of pure decode steps without drafts");
  w_spec_plain_tokens_ = counter("moe_worker_spec_plain_step_tokens_total", "Tokens those plain steps produced");
  w_spec_verify_s_ = counter("moe_worker_spec_verify_step_seconds_total",
                             "Speculative decoding: loop time of pure decode steps that verified drafts");
  w_spec_verify_tokens_ = counter("moe_worker_spec_verify_step_tokens_total", "Tokens those verify steps produced");
  w_spec_guard_blocks_ = counter("moe_worker_spec_guard_blocks_total",
                                 "Speculative auto: verdicts that blocked a drafter whose steps delivered less");
  w_waiting_ = gauge("moe_worker_waiting_sequences", "Sequences whose prompt is not fully fed yet on each worker");
  w_disk_bytes_ = gauge("moe_worker_prefix_disk_bytes", "Bytes of the prefix cache's disk tier (--prefix-cache-dir)");
  w_disk_cap_ = gauge("moe_worker_prefix_disk_capacity_bytes", "Bound of the disk tier (--prefix-cache-disk-bytes)");
  w_disk_files_ = gauge("moe_worker_prefix_disk_files", "Disk-tier files of the worker's model");
  w_pass_cap_ = gauge("moe_worker_prefill_pass_capacity_rows",
                      "Prompt rows one layer-major prefill pass holds (0: chunked prefill)");
  w_pass_slice_ = gauge("moe_worker_prefill_max_slice_seconds",
                        "Longest prefill-pass slice other sequences waited behind (the latency a pass adds)");
  w_disk_hits_ = counter("moe_worker_prefix_disk_hit_tokens_total", "Prompt tokens whose KV was read from the disk tier");
  w_disk_ignored_ = counter("moe_worker_prefix_disk_ignored_total",
                            "Disk-tier files refused (damaged, truncated, other version or model)");
  w_passes_ = counter("moe_worker_prefill_passes_total", "Layer-major prefill passes finished");
  w_pass_rows_ = counter("moe_worker_prefill_pass_rows_total", "Prompt rows fed by prefill passes");
  w_tokens_ = counter("moe_worker_tokens_total", "Tokens streamed from each worker");
  w_steps_ = counter("moe_worker_steps_total", "Engine steps run by each worker");
  w_fetches_ = counter("moe_worker_expert_fetches_total",
                       "Routed-expert fetches of each worker (one per distinct expert per layer per step)");
  w_prefix_hits_ = counter("moe_worker_prefix_cache_hit_tokens_total", "Prompt tokens served from the prefix cache");
  w_prefix_lookups_ = counter("moe_worker_prefix_cache_lookups_total", "Prefix cache lookups");
  w_peer_remote_ = counter("moe_worker_peer_remote_jobs_total",
                           "Expert parallelism: (layer, expert) jobs each worker sent to the host that owns them");
  w_peer_fallback_ = counter("moe_worker_peer_fallback_jobs_total",
                             "Expert parallelism: jobs computed on the worker's host after their owner failed");
  w_peer_failed_ = counter("moe_worker_peer_failed_calls_total",
                           "Expert parallelism: RunExperts calls that failed, timed out or were refused");
  w_peer_sent_ = counter("moe_worker_peer_bytes_sent_total", "Expert parallelism: activation bytes sent to owners");
  w_peer_received_ = counter("moe_worker_peer_bytes_received_total",
                             "Expert parallelism: expert-output bytes received from owners");
  w_peer_served_ = counter("moe_worker_peer_served_jobs_total",
                           "Expert parallelism: jobs the worker computed as owner for other hosts");
  w_peer_refused_ = counter("moe_worker_peer_refused_calls_total",
                            "Expert parallelism: RunExperts calls the worker refused (token, model, epoch, bound)");
}

void Metrics::ObserveRequest(const std::string& endpoint, int http_status, double seconds) {
  requests_->Add({{"endpoint", endpoint}, {"code", std::to_string(http_status)}}).Increment();
  duration_->Add({{"endpoint", endpoint}}, kLatencyBuckets).Observe(seconds);
}

void Metrics::Advance(Counters* family, const std::string& worker, int64_t total, double scale) {
  int64_t& last = last_total_[{family, worker}];
  // A total below the last one: the worker restarted and counts from 0 again.
  const int64_t moved = total >= last ? total - last : total;
  last = total;
  auto& c = family->Add({{"worker", worker}});
  if (moved > 0) c.Increment(static_cast<double>(moved) * scale);
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
      w_hit_->Add(l).Set(w.info.expert_hit_rate);
      w_cancel_late_->Add(l).Set(static_cast<double>(w.info.max_steps_after_cancel));
      w_kv_->Add(l).Set(static_cast<double>(w.info.kv_bytes));
      w_prefix_bytes_->Add(l).Set(static_cast<double>(w.info.prefix_cache_bytes));
      w_prefix_cap_->Add(l).Set(static_cast<double>(w.info.prefix_cache_capacity_bytes));
      w_prefix_use_->Add(l).Set(w.info.prefix_cache_capacity_bytes > 0
                                    ? static_cast<double>(w.info.prefix_cache_bytes) /
                                          static_cast<double>(w.info.prefix_cache_capacity_bytes)
                                    : 0.0);
      Advance(w_tokens_, w.name, w.tokens_generated);
      Advance(w_steps_, w.name, w.info.steps);
      Advance(w_fetches_, w.name, w.info.expert_fetches);
      Advance(w_prefix_hits_, w.name, w.info.prefix_cache_hit_tokens);
      Advance(w_prefix_lookups_, w.name, w.info.prefix_cache_lookups);
      Advance(w_spec_steps_, w.name, w.info.spec_decode_steps);
      Advance(w_spec_tokens_, w.name, w.info.spec_decode_tokens);
      Advance(w_spec_drafted_, w.name, w.info.spec_drafted);
      Advance(w_spec_accepted_, w.name, w.info.spec_accepted);
      Advance(w_spec_plain_s_, w.name, w.info.spec_plain_step_us, 1e-6);
      Advance(w_spec_plain_tokens_, w.name, w.info.spec_plain_step_tokens);
      Advance(w_spec_verify_s_, w.name, w.info.spec_verify_step_us, 1e-6);
      Advance(w_spec_verify_tokens_, w.name, w.info.spec_verify_step_tokens);
      Advance(w_spec_guard_blocks_, w.name, w.info.spec_guard_blocks);
      Advance(w_peer_remote_, w.name, w.info.peer_remote_jobs);
      Advance(w_peer_fallback_, w.name, w.info.peer_fallback_jobs);
      Advance(w_peer_failed_, w.name, w.info.peer_failed_calls);
      Advance(w_peer_sent_, w.name, w.info.peer_bytes_sent);
      Advance(w_peer_received_, w.name, w.info.peer_bytes_received);
      Advance(w_peer_served_, w.name, w.info.peer_served_jobs);
      Advance(w_peer_refused_, w.name, w.info.peer_refused_calls);
      w_waiting_->Add(l).Set(w.info.waiting_sequences);
      w_disk_bytes_->Add(l).Set(static_cast<double>(w.info.prefix_disk_bytes));
      w_disk_cap_->Add(l).Set(static_cast<double>(w.info.prefix_disk_capacity_bytes));
      w_disk_files_->Add(l).Set(static_cast<double>(w.info.prefix_disk_files));
      w_pass_cap_->Add(l).Set(static_cast<double>(w.info.prefill_pass_capacity_rows));
      w_pass_slice_->Add(l).Set(w.info.prefill_max_slice_seconds);
      Advance(w_disk_hits_, w.name, w.info.prefix_disk_hit_tokens);
      Advance(w_disk_ignored_, w.name, w.info.prefix_disk_ignored);
      Advance(w_passes_, w.name, w.info.prefill_passes);
      Advance(w_pass_rows_, w.name, w.info.prefill_pass_rows);
      w_spec_tps_->Add(l).Set(w.info.spec_decode_steps > 0 ? static_cast<double>(w.info.spec_decode_tokens) /
                                                                 static_cast<double>(w.info.spec_decode_steps)
                                                           : 0.0);
      for (size_t p = 0; p < w.info.spec_drafted_per_position.size() &&
                         p < w.info.spec_accepted_per_position.size();
           ++p) {
        const double d = static_cast<double>(w.info.spec_drafted_per_position[p]);
        w_spec_accept_->Add({{"worker", w.name}, {"position", std::to_string(p)}})
            .Set(d > 0 ? static_cast<double>(w.info.spec_accepted_per_position[p]) / d : 0.0);
      }
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
