// inferd: one inference worker over the project's engine.
//
//   inferd --model /srv/models/glm --listen unix:/run/moestream/inferd0.sock [--config FILE]
//          [--expertd unix:/run/moestream/expertd.sock]
//
// Routed experts: with --expertd, from the host's shared expertd (one cache
// for every worker; hits are leases in shared memory, misses one RPC per
// layer); the model must then be a converted container (the one expertd
// serves). Without it (a worker run alone), from an in-process store bounded
// by --expert-budget.
#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "common/model/memory_fit.h"
#include "services/expertd_client/remote_expert_source.h"
#include "services/inferd/engine_model.h"
#include "services/inferd/service.h"

namespace {

class EngineFactory final : public moe::inferd::ModelFactory {
 public:
  void AddFlags(moe::FlagSet& f) override {
    f.AddString("model", &model_, "model directory (config.json + safetensors)");
    f.AddBytes("expert-budget", &expert_budget_, "in-process expert cache budget (bytes, K/M/G; without --expertd)");
    f.AddString("expertd", &expertd_,
                "expertd socket (unix:PATH or PATH): routed experts from the shared expertd; empty: in-process store");
    f.AddBool("batched-forward", &batched_forward_,
              "one forward per step over all sequences (false: one forward per sequence; benchmark baseline)");
    f.AddInt("max-context", &max_context_, "context per sequence (0: the model's max_position_embeddings)");
    f.AddBytes("ram-budget", &ram_budget_,
               "RAM for resident weights + KV of one --max-context sequence + in-process expert cache (0: no "
               "budget; the plan must still fit MemAvailable)");
  }
  absl::StatusOr<std::unique_ptr<moe::inferd::SequenceModel>> Create() override {
    if (model_.empty()) return absl::InvalidArgumentError("--model is required");
    moe::EngineConfig cfg;
    if (expert_budget_ > 0) cfg.expert_budget_bytes = static_cast<int64_t>(expert_budget_);
    if (!expertd_.empty()) {
      const std::string addr = expertd_;
      cfg.expert_source = [addr](const moe::Container& c) -> absl::StatusOr<std::unique_ptr<moe::ExpertSource>> {
        auto src = moe::expertd::RemoteExpertSource::Connect(addr, &c);
        if (!src.ok()) {
          return absl::Status(src.status().code(),
                              absl::StrCat("--expertd ", addr, ": ", src.status().message()));
        }
        return std::unique_ptr<moe::ExpertSource>(std::move(*src));
      };
      MOE_LOG(INFO) << "inferd: routed experts from expertd at " << addr;
    }
    // Refuse at start what cannot fit (the budget, or the machine's available
    // memory), before anything is loaded; the in-process expert cache gets
    // what the budget leaves.
    if (ram_budget_ > 0 && expert_budget_ > 0)
      return absl::InvalidArgumentError("give --ram-budget or --expert-budget, not both");
    auto fit = moe::FitMemoryPlan(model_, ram_budget_, max_context_ > 0 ? max_context_ : -1, cfg);
    if (!fit.ok()) return fit.status();
    cfg = fit->config;
    MOE_LOG(INFO) << "inferd: memory plan: " << fit->report;
    auto m = moe::inferd::EngineModel::Open(model_, cfg, max_context_);
    if (!m.ok()) return m.status();
    (*m)->set_batched_forward(batched_forward_);
    return std::unique_ptr<moe::inferd::SequenceModel>(std::move(*m));
  }

 private:
  std::string model_;
  std::string expertd_;
  bool batched_forward_ = true;
  uint64_t expert_budget_ = 0;
  uint64_t ram_budget_ = 0;
  int64_t max_context_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  EngineFactory f;
  return moe::inferd::RunInferd(argc, argv, f);
}
