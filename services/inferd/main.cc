// inferd: one inference worker over the project's engine.
//
//   inferd --model /srv/models/glm --listen unix:/run/moestream/inferd0.sock [--config FILE]
#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "services/inferd/engine_model.h"
#include "services/inferd/service.h"

namespace {

class EngineFactory final : public moe::inferd::ModelFactory {
 public:
  void AddFlags(moe::FlagSet& f) override {
    f.AddString("model", &model_, "model directory (config.json + safetensors)");
    f.AddBytes("expert-budget", &expert_budget_, "in-process expert cache budget (bytes, K/M/G)");
    f.AddInt("max-context", &max_context_, "context per sequence (0: the model's max_position_embeddings)");
  }
  absl::StatusOr<std::unique_ptr<moe::inferd::SequenceModel>> Create() override {
    if (model_.empty()) return absl::InvalidArgumentError("--model is required");
    moe::EngineConfig cfg;
    if (expert_budget_ > 0) cfg.expert_budget_bytes = static_cast<int64_t>(expert_budget_);
    auto plan = moe::Engine::Plan(model_, cfg);
    if (!plan.ok()) return plan.status();
    MOE_LOG(INFO) << "inferd: memory plan: " << plan->ToString();
    auto m = moe::inferd::EngineModel::Open(model_, cfg, max_context_);
    if (!m.ok()) return m.status();
    return std::unique_ptr<moe::inferd::SequenceModel>(std::move(*m));
  }

 private:
  std::string model_;
  uint64_t expert_budget_ = 0;
  int64_t max_context_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  EngineFactory f;
  return moe::inferd::RunInferd(argc, argv, f);
}
