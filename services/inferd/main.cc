// inferd: one inference worker over the project's engine.
//
//   inferd --model /srv/models/glm --listen unix:/run/moestream/inferd0.sock [--config FILE]
//          [--expertd unix:/run/moestream/expertd.sock]
//
// The engine's flags (--model, --attention, --kv-dtype, --ram-budget,
// --expert-budget, --expertd) are moe run's (EngineFlags,
// common/model/engine_flags.h): the same choices and the same refusal of a
// memory plan that cannot fit.
//
// Routed experts: with --expertd, from the host's shared expertd (one cache
// for every worker; hits are leases in shared memory, misses one RPC per
// layer); the model must then be a converted container (the one expertd
// serves). Without it (a worker run alone), from the in-process
// LocalExpertSource bounded by --expert-budget or what --ram-budget leaves.
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "common/model/engine_flags.h"
#include "common/text/model_text.h"
#include "common/text/output_vocab.h"
#include "services/expertd_client/remote_expert_source.h"
#include "services/inferd/engine_identity.h"
#include "services/inferd/engine_model.h"
#include "services/inferd/service.h"
#include "services/peer/peer_flags.h"

namespace {

class EngineFactory final : public moe::inferd::ModelFactory {
 public:
  void AddFlags(moe::FlagSet& f) override {
    engine_.Register(f,
                     "model directory: HF checkpoint (config.json + safetensors) or converted container (with "
                     "--expertd: the one expertd serves)");
    f.AddBool("batched-forward", &batched_forward_,
              "one forward per step over all sequences (false: one forward per sequence; benchmark baseline)");
    f.AddInt("max-context", &max_context_, "context per sequence (0: the model's max_position_embeddings)");
    peers_.Register(f);
  }
  absl::StatusOr<std::unique_ptr<moe::inferd::SequenceModel>> Create() override {
    // A peer flag without expert parallelism would be ignored: refused before anything loads.
    if (absl::Status st = peers_.CheckUnused(); !st.ok()) return st;
    // Refuse at start what cannot fit (the budget, or the machine's available
    // memory), before anything is loaded; the in-process expert cache gets
    // what --ram-budget leaves.
    auto fit = engine_.Resolve(max_context_ > 0 ? max_context_ : -1, moe::EngineConfig{},
                               moe::expertd::RemoteSourceFactory);
    if (!fit.ok()) return fit.status();
    if (!engine_.expertd.empty()) {
      MOE_LOG(INFO) << "inferd: routed experts from expertd at " << engine_.expertd;
    }
    MOE_LOG(INFO) << "inferd: memory plan: " << fit->report;
    // A serving plan bounds each sequence by its context and all of them by its KV.
    const int64_t context = max_context_ > 0 ? max_context_ : fit->context;
    auto m = moe::inferd::EngineModel::Open(engine_.model, fit->config, context);
    if (!m.ok()) return m.status();
    if (fit->kv_budget_bytes > 0) (*m)->set_kv_budget(fit->kv_budget_bytes, fit->plan.kv_bytes_per_token);
    (*m)->set_batched_forward(batched_forward_);
    (*m)->set_planned_pass_bytes(fit->prefill_pass_bytes);
    if (peers_.enabled()) {
      // Expert parallelism: the experts other hosts own are computed there (docs/MULTIHOST.md).
      auto identity = (*m)->StateIdentity();
      if (!identity.ok()) return identity.status();
      auto weights = (*m)->WeightsIdentity();
      if (!weights.ok()) return weights.status();
      auto node = moe::peer::StartPeerNode(peers_, (*m)->engine().mutable_model(), (*m)->engine().container(),
                                           *identity, *weights);
      if (!node.ok()) return node.status();
      (*m)->set_peer_node(std::move(*node));
    }
    return std::unique_ptr<moe::inferd::SequenceModel>(std::move(*m));
  }
  // Structured outputs: the model directory's tokenizer unless --tokenizer names another
  // (a converted container usually has none: give the gateway's --tokenizer directory).
  absl::StatusOr<moe::inferd::ConstraintVocab> Vocabulary(const std::string& tokenizer) override {
    const std::string dir = tokenizer.empty() ? engine_.model : tokenizer;
    if (tokenizer.empty() && !std::filesystem::exists(dir + "/tokenizer.json") &&
        !std::filesystem::exists(dir + "/tokenizer.json.gz")) {
      return absl::NotFoundError(absl::StrCat("no tokenizer.json in the model directory ", dir, " (give --tokenizer)"));
    }
    moe::text::ModelTextOptions mo;
    mo.require_chat = false;
    auto mt = moe::text::LoadModelText(dir, mo);
    if (!mt.ok()) return mt.status();
    moe::inferd::ConstraintVocab v;
    v.texts = moe::text::OutputTokenTexts(*mt->tokenizer, moe::text::OutputMarkers(mt->family));
    v.stop_ids = mt->stop_ids;
    v.source = absl::StrCat("tokenizer ", dir);
    return v;
  }

 private:
  moe::EngineFlags engine_;
  moe::peer::PeerFlags peers_;
  bool batched_forward_ = true;
  int64_t max_context_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  EngineFactory f;
  return moe::inferd::RunInferd(argc, argv, f);
}
