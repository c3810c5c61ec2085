// moe score: teacher-forced argmax and log-probabilities of a token sequence.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "common/base/flags.h"
#include "common/base/status.h"
#include "common/model/engine.h"
#include "services/expertd_client/remote_expert_source.h"
#include "tools/moe/commands.h"
#include "tools/moe/model_flags.h"

namespace moe::cli {

namespace {

absl::Status DoScore(int argc, char** argv) {
  bool json = false;
  FlagSet flags("score", "Teacher-forced scoring: per position the argmax and log p(next token).");
  EngineFlags engine;
  engine.model = DefaultModelDir();
  engine.Register(flags, "model directory (default: the embedded demo model models/glm-tiny-chat)");
  PromptFlags prompt_flags;
  AddPromptFlags(flags, "ids", &prompt_flags);
  flags.AddBool("json", &json, "print JSON");
  MOE_RETURN_IF_ERROR(flags.Parse(argc, argv));
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return absl::OkStatus();
  }
  if (engine.model.empty()) return absl::InvalidArgumentError("--model is required (no embedded model found)");
  MOE_ASSIGN_OR_RETURN(Prompt in, ResolvePrompt(prompt_flags, "ids", engine.model, /*allow_empty=*/false));
  const std::vector<int32_t>& ids = in.ids;
  MOE_ASSIGN_OR_RETURN(EngineConfig ec, PlanAndCheck(engine, static_cast<int64_t>(ids.size()), EngineConfig{},
                                                     expertd::RemoteSourceFactory));
  MOE_ASSIGN_OR_RETURN(auto eng, Engine::Open(engine.model, ec));
  MOE_ASSIGN_OR_RETURN(auto rows, eng->Score(ids));
  if (json) {
    nlohmann::json j = nlohmann::json::array();
    for (size_t i = 0; i < rows.size(); ++i) {
      nlohmann::json r = {{"position", i}, {"token", ids[i]}, {"argmax", rows[i].argmax},
                          {"argmax_logprob", rows[i].argmax_logprob}};
      if (i + 1 < rows.size()) {
        r["next"] = ids[i + 1];
        r["next_logprob"] = rows[i].next_logprob;
      }
      j.push_back(r);
    }
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("pos\ttoken\targmax\targmax_logprob\tnext\tnext_logprob\n");
    for (size_t i = 0; i < rows.size(); ++i) {
      if (i + 1 < rows.size()) {
        std::printf("%zu\t%d\t%d\t%.6f\t%d\t%.6f\n", i, ids[i], rows[i].argmax, rows[i].argmax_logprob, ids[i + 1],
                    rows[i].next_logprob);
      } else {
        std::printf("%zu\t%d\t%d\t%.6f\t-\t-\n", i, ids[i], rows[i].argmax, rows[i].argmax_logprob);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

int RunScore(int argc, char** argv) {
  if (auto s = DoScore(argc, argv); !s.ok()) return Fail("score", s);
  return 0;
}

}  // namespace moe::cli
