// moe run: generate tokens from a model directory (HF checkpoint or container).
// --expertd ADDR: routed experts come from a running expertd (shared cache,
// RemoteExpertSource) instead of the in-process store; needs a container.
// --record-routing FILE: writes every (position, layer, top-k expert ids) of
// the run as a routing trace (common/expertstore/routing_trace.h format, one line
// per position x MoE layer, sorted by position then layer) for `moe bench cache`,
// each row preceded by the router look-ahead's prediction of it made at the
// layer before ("+" lines, trace version 2). With speculation (auto, the
// default) it holds what the run fetched: verify rows (the last routing seen
// at a position) and the MTP layer's draft rows too; --speculative off for the
// plain decode's routing alone.
#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/base/flags.h"
#include "common/base/status.h"
#include "common/expertstore/routing_trace.h"
#include "common/model/engine.h"
#include "services/expertd_client/remote_expert_source.h"
#include "tools/moe/commands.h"
#include "tools/moe/model_flags.h"
#include "tools/moe/profile_json.h"

namespace moe::cli {

namespace {

// Forwards Get/Stats; drops hints when prefetch is off. Measures how much
// of each layer's routing (Hint) the router look-ahead predicted (HintAhead).
class HintGate final : public ExpertSource {
 public:
  HintGate(std::unique_ptr<ExpertSource> s, bool hints) : s_(std::move(s)), hints_(hints) {}
  absl::StatusOr<ExpertLease> Get(int layer, int expert) override { return s_->Get(layer, expert); }
  void Hint(std::span<const ExpertKey> keys) override {
    {
      std::lock_guard<std::mutex> l(mu_);
      // Layers without a prediction (long prefills) are not counted.
      for (const auto& k : keys) {
        auto it = predicted_.find(k.layer);
        if (it == predicted_.end()) break;
        ++actual_;
        for (int e : it->second)
          if (e == k.expert) ++predicted_right_;
      }
      if (!keys.empty()) predicted_.erase(keys[0].layer);
    }
    if (hints_) s_->Hint(keys);
  }
  void HintAhead(std::span<const ExpertKey> keys) override {
    {
      std::lock_guard<std::mutex> l(mu_);
      for (const auto& k : keys) predicted_[k.layer].push_back(k.expert);
    }
    if (hints_) s_->HintAhead(keys);
  }
  ExpertSourceStats Stats() const override { return s_->Stats(); }
  // Share of routed experts the look-ahead named in advance (batches the
  // model predicted for: decode steps).
  double LookAheadRecall() const {
    std::lock_guard<std::mutex> l(mu_);
    return actual_ ? double(predicted_right_) / double(actual_) : 0.0;
  }

 private:
  std::unique_ptr<ExpertSource> s_;
  bool hints_;
  mutable std::mutex mu_;
  std::map<int, std::vector<int>> predicted_;  // layer -> look-ahead ids
  int64_t actual_ = 0, predicted_right_ = 0;
};

// Collects the routing tap's rows; Write emits the trace file.
class RoutingRecorder {
 public:
  void Add(int layer, int64_t pos, std::span<const int> experts) {
    std::lock_guard<std::mutex> l(mu_);
    rows_[{pos, layer}].assign(experts.begin(), experts.end());
  }
  // The router look-ahead's prediction for (pos, layer), made at layer - 1.
  void AddAhead(int layer, int64_t pos, std::span<const int> experts) {
    std::lock_guard<std::mutex> l(mu_);
    ahead_[{pos, layer}].assign(experts.begin(), experts.end());
  }
  // In (position, layer) order: the taps fire from the engine's threads.
  absl::Status Write(const std::string& path, const ModelConfig& c) const {
    expertstore::RoutingTrace t;
    t.num_layers = c.num_hidden_layers + 1;  // + the MTP layer
    t.num_experts = c.n_routed_experts;
    t.top_k = c.num_experts_per_tok;
    for (const auto& [key, ids] : rows_) {
      if (ids.size() != t.top_k)  // the trace format holds exactly top_k per row
        return absl::InternalError(absl::StrCat("--record-routing: position ", key.first, " layer ", key.second,
                                                " routed to ", ids.size(), " experts, not top-", t.top_k));
      const auto a = ahead_.find(key);
      expertstore::AppendRow(t, key.first, uint32_t(key.second), ids,
                             a != ahead_.end() ? std::span<const uint32_t>(a->second) : std::span<const uint32_t>());
    }
    if (auto s = expertstore::SaveTrace(t, path); !s.ok())
      return absl::InvalidArgumentError(absl::StrCat("--record-routing: ", s.message()));
    return absl::OkStatus();
  }

 private:
  std::mutex mu_;
  std::map<std::pair<int64_t, int>, std::vector<uint32_t>> rows_, ahead_;
};

// Milliseconds per component (divided by `per`: decode steps), the expert
// fetch split into disk wait and IPC by the source's counters (after - before).
nlohmann::json BreakdownJson(const StepProfile& p, const ExpertSourceStats& after, const ExpertSourceStats& before,
                             int64_t per) {
  const double k = 1e3 / static_cast<double>(per);
  nlohmann::json j = StepProfileJson(p, k, "ms");
  j["fetch_wait_ms"] = (after.fetch_wait_seconds - before.fetch_wait_seconds) * k;
  j["ipc_ms"] = (after.ipc_seconds - before.ipc_seconds) * k;
  return j;
}

absl::Status DoRun(int argc, char** argv, bool* help) {
  std::string save_kv, resume_kv, record_routing;
  bool prefetch = true;
  int64_t max_tokens = 32;
  bool json = false;
  FlagSet flags("run", "Generate tokens with the engine from a model directory (HF checkpoint or `moe convert` container).");
  EngineFlags engine;
  engine.model = DefaultModelDir();
  engine.Register(flags,
                  "model directory: HF checkpoint (config.json + safetensors) or converted container (default: the "
                  "embedded demo model models/glm-tiny-chat)");
  PromptFlags prompt_flags;
  AddPromptFlags(flags, "prompt-ids", &prompt_flags);
  flags.AddInt("max-tokens", &max_tokens, "tokens to generate");
  SamplingFlags sampling;
  sampling.Register(flags);
  flags.AddString("save-kv", &save_kv, "write the conversation's KV cache to this file at the end");
  flags.AddString("resume-kv", &resume_kv, "continue the conversation saved in this file (prompt is appended)");
  flags.AddBool("json", &json, "print tokens and stats as JSON");
  flags.AddBool("prefetch", &prefetch, "send prefetch hints to the expert source (--no-prefetch: off)");
  std::string speculative = "auto";  // as inferd
  int64_t draft_tokens = 3;
  flags.AddString("speculative", &speculative,
                  "speculative decoding: auto (default), off, mtp or ngram (inferd's flag; the tokens never change)");
  flags.AddInt("draft-tokens", &draft_tokens, "most drafts per step (K, 1..8)");
  flags.AddString("record-routing", &record_routing,
                  "write the routing trace (position, layer, expert ids) to this file (moe bench cache --trace)");
  MOE_RETURN_IF_ERROR(flags.Parse(argc, argv));
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    *help = true;
    return absl::OkStatus();
  }
  if (engine.model.empty()) return absl::InvalidArgumentError("--model is required (no embedded model found)");
  MOE_ASSIGN_OR_RETURN(Prompt in,
                       ResolvePrompt(prompt_flags, "prompt-ids", engine.model, /*allow_empty=*/!resume_kv.empty()));
  // Taken once: g++ 12 warns (falsely) about reading the optional much later.
  const text::Tokenizer* tokenizer = in.text ? in.text->tokenizer.get() : nullptr;
  std::vector<int32_t> prompt = std::move(in.ids);
  if (max_tokens < 1) return absl::InvalidArgumentError("--max-tokens must be >= 1");
  MOE_ASSIGN_OR_RETURN(const SamplingParams sp, sampling.Resolve());
  MOE_ASSIGN_OR_RETURN(const SpecMode spec_mode, ParseSpecMode(speculative));
  const SpecOptions spec{spec_mode, static_cast<int>(std::clamp<int64_t>(draft_tokens, -1, 1000))};
  MOE_RETURN_IF_ERROR(CheckSpecOptions(spec));

  std::optional<KvCache> resumed;
  if (!resume_kv.empty()) {
    MOE_ASSIGN_OR_RETURN(KvCache c, KvCache::Load(resume_kv));
    std::vector<int32_t> feed;
    if (c.pending_token() >= 0) feed.push_back(c.pending_token());
    feed.insert(feed.end(), prompt.begin(), prompt.end());
    prompt = feed;
    if (prompt.empty()) return absl::InvalidArgumentError("--resume-kv: nothing to continue from; give a prompt");
    // The cache's storage is the file's; a different --kv-dtype cannot act.
    const char* stored = c.dtype() == KvDtype::kBF16 ? "bf16" : "f32";
    if (flags.WasSet("kv-dtype") && engine.kv_dtype != stored)
      return absl::InvalidArgumentError(absl::StrCat("--kv-dtype ", engine.kv_dtype, ": the --resume-kv file holds a ",
                                                     stored, " cache"));
    engine.kv_dtype = stored;
    resumed.emplace(std::move(c));
  }
  const int64_t ctx = (resumed ? resumed->length() : 0) + static_cast<int64_t>(prompt.size()) + max_tokens;
  // With --expertd the engine's source is RemoteExpertSource behind a HintGate
  // (the in-process source ignores hints, so --no-prefetch matters with --expertd only).
  HintGate* gate = nullptr;
  auto connect = [prefetch, &gate](const std::string& addr) -> EngineConfig::ExpertSourceFactory {
    return [remote = expertd::RemoteSourceFactory(addr), prefetch,
            &gate](const Container& c) -> absl::StatusOr<std::unique_ptr<ExpertSource>> {
      MOE_ASSIGN_OR_RETURN(std::unique_ptr<ExpertSource> src, remote(c));
      auto g = std::make_unique<HintGate>(std::move(src), prefetch);
      gate = g.get();
      return std::unique_ptr<ExpertSource>(std::move(g));
    };
  };
  MOE_ASSIGN_OR_RETURN(EngineConfig ec, PlanAndCheck(engine, ctx, EngineConfig{}, connect));
  MOE_ASSIGN_OR_RETURN(auto eng, Engine::Open(engine.model, ec));
  StepProfile profile;  // where the time goes (--json "breakdown")
  eng->mutable_model().set_profile(&profile);
  RoutingRecorder recorder;
  if (!record_routing.empty()) {
    eng->mutable_model().set_route_tap(
        [&recorder](int layer, int64_t pos, std::span<const int> ids) { recorder.Add(layer, pos, ids); });
    eng->mutable_model().set_lookahead_tap(
        [&recorder](int layer, int64_t pos, std::span<const int> ids) { recorder.AddAhead(layer, pos, ids); });
  }
  KvCache cache = resumed ? std::move(*resumed) : eng->NewCache();
  if (cache.num_layers() != eng->config().num_hidden_layers) {
    return absl::InvalidArgumentError("--resume-kv: the cache file was written for a different model");
  }
  MOE_ASSIGN_OR_RETURN(GenerateResult r, eng->Generate(prompt, max_tokens, sp, cache, spec));
  if (!save_kv.empty()) MOE_RETURN_IF_ERROR(cache.Save(save_kv));
  if (!record_routing.empty()) MOE_RETURN_IF_ERROR(recorder.Write(record_routing, eng->config()));
  const auto st = eng->expert_source().Stats();
  const double decode_tps =
      r.tokens.size() > 1 && r.decode_seconds > 0 ? (r.tokens.size() - 1) / r.decode_seconds : 0.0;
  const double prefill_tps = r.prefill_seconds > 0 ? prompt.size() / r.prefill_seconds : 0.0;
  if (json) {
    nlohmann::json j;
    j["tokens"] = r.tokens;
    j["stopped_at_eos"] = r.stopped_at_eos;
    if (tokenizer) j["text"] = tokenizer->Decode(r.tokens, /*skip_special=*/true);
    j["stats"] = {{"prompt_tokens", prompt.size()},
                  {"generated_tokens", r.tokens.size()},
                  {"prefill_seconds", r.prefill_seconds},
                  {"decode_seconds", r.decode_seconds},
                  {"prefill_tokens_per_second", prefill_tps},
                  {"decode_tokens_per_second", decode_tps},
                  {"expert_gets", st.gets},
                  {"expert_hits", st.hits},
                  {"expert_misses", st.misses},
                  {"expert_hit_rate", st.HitRate()},
                  {"expert_evictions", st.evictions},
                  {"bytes_read", st.bytes_read},
                  {"prefill_expert_bytes", r.prefill_expert_bytes},
                  {"decode_expert_bytes", r.decode_expert_bytes},
                  {"kv_bytes", cache.Bytes()},
                  {"lookahead_recall", gate ? gate->LookAheadRecall() : 0.0},
                  {"peak_rss_bytes", PeakRssBytes()},
                  {"attention", AttentionPathName(eng->model().options().attention)}};
    j["speculative"] = {{"mode", SpecModeName(spec.mode)},
                        {"draft_tokens", spec.draft_tokens},
                        {"decode_steps", r.spec.steps},
                        {"drafted", r.spec.drafted},
                        {"accepted", r.spec.accepted},
                        {"drafted_per_position", r.spec.drafted_at},
                        {"accepted_per_position", r.spec.accepted_at},
                        {"tokens_per_step", r.spec.TokensPerStep()}};
    j["breakdown"] = {{"prefill", BreakdownJson(r.prefill_profile, r.source_after_prefill, {}, 1)},
                      {"decode_per_token",
                       BreakdownJson(r.decode_profile, st, r.source_after_prefill,
                                     std::max<int64_t>(1, r.decode_profile.forwards))}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    for (size_t i = 0; i < r.tokens.size(); ++i) std::printf("%s%d", i ? "," : "", r.tokens[i]);
    std::printf("\n");
    if (tokenizer) std::printf("%s\n", tokenizer->Decode(r.tokens, /*skip_special=*/true).c_str());
    std::fprintf(stderr,
                 "%zu tokens; prefill %.1f tok/s, decode %.2f tok/s (%s attention); expert hit rate %.3f; read %lld "
                 "B; peak RSS %lld B\n",
                 r.tokens.size(), prefill_tps, decode_tps,
                 std::string(AttentionPathName(eng->model().options().attention)).c_str(), st.HitRate(),
                 static_cast<long long>(st.bytes_read), static_cast<long long>(PeakRssBytes()));
  }
  return absl::OkStatus();
}

}  // namespace

int RunRun(int argc, char** argv) {
  bool help = false;
  if (auto s = DoRun(argc, argv, &help); !s.ok()) return Fail("run", s);
  return 0;
}

}  // namespace moe::cli
