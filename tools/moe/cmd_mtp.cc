// moe mtp: how often the MTP layer's one-token draft would be accepted.
//
// Problem: speculative decoding with the MTP (nextn) layer pays off only if its drafts match what the
// main model decides; the rate depends on the trained weights and the text, so it is measured, not
// assumed. For greedy verification with one draft token per step (docs/MODEL.md section 5), the draft
// for position j+2 comes from (h_j, t_{j+1}) and is accepted iff it equals the main model's argmax
// at j+1, given the same prefix. Teacher-forced over a sequence, that is one main Forward over all
// rows plus one MtpForward over all slots ("draft extend" of the whole context), which is what this
// command computes:
//   --text-file F: the file's text (special tokens parsed), cut into --window token windows, each
//                  from a fresh cache: the held-out-text acceptance rate.
//   prompt flags (--ids / --prompt / --chat): greedy-generate --max-tokens after the prompt, then
//                  count the slots that draft generated tokens: the acceptance a 1-token speculative
//                  greedy decoder would see on that answer.
// Also reported: drafts equal to the true next-next token (text mode).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/base/flags.h"
#include "common/base/status.h"
#include "common/model/engine.h"
#include "common/text/model_text.h"
#include "services/expertd_client/remote_expert_source.h"
#include "tools/moe/commands.h"
#include "tools/moe/model_flags.h"

namespace moe::cli {

namespace {

struct Counts {
  int64_t slots = 0, accepted = 0, exact = 0, windows = 0;
};

// Drafts for slots [first, ids.size()-2) of `ids`; `first` lets generation mode count only the
// slots that draft generated tokens.
absl::Status Measure(const Engine& eng, const std::vector<int32_t>& ids, size_t first, Counts* c) {
  if (ids.size() < 3) return absl::OkStatus();
  MOE_ASSIGN_OR_RETURN(MtpDrafts d, eng.TeacherForcedMtpDrafts(ids));
  for (size_t j = first; j + 2 < ids.size(); ++j) {
    ++c->slots;
    c->accepted += d.draft[j] == d.main_argmax[j + 1];
    c->exact += d.draft[j] == ids[j + 2];
  }
  ++c->windows;
  return absl::OkStatus();
}

absl::Status DoMtp(int argc, char** argv) {
  std::string text_file;
  int64_t window = 128, max_windows = 0, max_tokens = 32;
  bool json = false;
  FlagSet flags("mtp", "MTP draft acceptance (1 draft token, greedy verification) on a text file or a generated answer.");
  EngineFlags engine;
  engine.model = DefaultModelDir();
  engine.Register(flags, "model directory (default: the embedded demo model)");
  PromptFlags prompt_flags;
  AddPromptFlags(flags, "ids", &prompt_flags);
  flags.AddString("text-file", &text_file, "text to measure on (special tokens parsed), in --window token windows");
  flags.AddInt("window", &window, "tokens per window (text mode)");
  flags.AddInt("max-windows", &max_windows, "stop after this many windows (0 = all)");
  flags.AddInt("max-tokens", &max_tokens, "tokens to generate greedily after the prompt (prompt mode)");
  flags.AddBool("json", &json, "print JSON");
  MOE_RETURN_IF_ERROR(flags.Parse(argc, argv));
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return absl::OkStatus();
  }
  if (engine.model.empty()) return absl::InvalidArgumentError("--model is required (no embedded model found)");
  const std::string& model = engine.model;
  const bool have_prompt = !prompt_flags.ids.empty() || !prompt_flags.text.empty() || !prompt_flags.chat.empty();
  if (have_prompt == !text_file.empty()) {
    return absl::InvalidArgumentError("give exactly one of --text-file and a prompt (--ids, --prompt, --chat)");
  }
  if (window < 3) return absl::InvalidArgumentError("--window must be >= 3");
  if (max_tokens < 2) return absl::InvalidArgumentError("--max-tokens must be >= 2");

  std::vector<int32_t> ids;
  if (!text_file.empty()) {
    std::ifstream in(text_file, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("--text-file: cannot read ", text_file));
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string dir = prompt_flags.tokenizer.empty() ? model : prompt_flags.tokenizer;
    text::ModelTextOptions topt;
    topt.require_chat = false;
    MOE_ASSIGN_OR_RETURN(text::ModelText mt, text::LoadModelText(dir, topt));
    ids = mt.tokenizer->Encode(ss.str(), text::EncodeOptions{.parse_special = true, .add_special_tokens = false});
    if (ids.size() < 3) return absl::InvalidArgumentError(absl::StrCat("--text-file ", text_file, ": fewer than 3 tokens"));
  } else {
    MOE_ASSIGN_OR_RETURN(Prompt p, ResolvePrompt(prompt_flags, "ids", model, /*allow_empty=*/false));
    ids = std::move(p.ids);
  }
  const int64_t ctx = text_file.empty() ? static_cast<int64_t>(ids.size()) + max_tokens : window;
  MOE_ASSIGN_OR_RETURN(EngineConfig ec, PlanAndCheck(engine, ctx, EngineConfig{}, expertd::RemoteSourceFactory));
  MOE_ASSIGN_OR_RETURN(auto eng, Engine::Open(model, ec));
  if (!eng->model().has_mtp()) return absl::FailedPreconditionError(absl::StrCat(model, " has no MTP layer"));

  Counts c;
  int64_t generated = 0;
  if (!text_file.empty()) {
    for (size_t at = 0; at + 3 <= ids.size(); at += static_cast<size_t>(window)) {
      if (max_windows > 0 && c.windows >= max_windows) break;
      const size_t end = std::min(ids.size(), at + static_cast<size_t>(window));
      std::vector<int32_t> w(ids.begin() + static_cast<std::ptrdiff_t>(at), ids.begin() + static_cast<std::ptrdiff_t>(end));
      MOE_RETURN_IF_ERROR(Measure(*eng, w, 0, &c));
    }
  } else {
    KvCache cache = eng->NewCache();
    MOE_ASSIGN_OR_RETURN(GenerateResult r, eng->Generate(ids, max_tokens, SamplingParams{}, cache));
    generated = static_cast<int64_t>(r.tokens.size());
    std::vector<int32_t> seq = ids;
    seq.insert(seq.end(), r.tokens.begin(), r.tokens.end());
    // Slot j drafts seq[j+2]; generated tokens start at index P = ids.size(). The first one comes
    // from the prefill itself, so the first draft a speculative decoder makes is slot P-1 (from
    // h_{P-1} and the first generated token), which drafts the second generated token.
    MOE_RETURN_IF_ERROR(Measure(*eng, seq, ids.size() - 1, &c));
  }
  const double acc = c.slots ? static_cast<double>(c.accepted) / static_cast<double>(c.slots) : 0.0;
  const double exact = c.slots ? static_cast<double>(c.exact) / static_cast<double>(c.slots) : 0.0;
  if (json) {
    nlohmann::json j = {{"slots", c.slots},          {"accepted", c.accepted}, {"acceptance_rate", acc},
                        {"draft_equals_next_next", c.exact}, {"next_next_rate", exact}, {"windows", c.windows},
                        {"tokens", ids.size()}};
    if (text_file.empty()) j["generated_tokens"] = generated;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("MTP drafts accepted %lld/%lld = %.3f (draft == true next-next token %.3f); %lld windows, %zu tokens\n",
                static_cast<long long>(c.accepted), static_cast<long long>(c.slots), acc, exact,
                static_cast<long long>(c.windows), ids.size());
  }
  return absl::OkStatus();
}

}  // namespace

int RunMtp(int argc, char** argv) {
  if (auto s = DoMtp(argc, argv); !s.ok()) return Fail("mtp", s);
  return 0;
}

}  // namespace moe::cli
