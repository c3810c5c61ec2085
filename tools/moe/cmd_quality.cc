// moe quality: how weight quantization changes a model's output, measured
// against the oracle goldens (HF BF16) and the engine's own unquantized
// distribution. Prints a markdown table: experts format x dense format ->
// greedy agreement, teacher-forced argmax agreement, mean KL(ref || quant).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/base/flags.h"
#include "common/base/status.h"
#include "common/model/engine.h"
#include "tools/moe/commands.h"
#include "tools/moe/model_flags.h"

namespace moe::cli {
namespace {

absl::StatusOr<std::vector<std::optional<QFormat>>> ParseFormats(const std::string& flag, const std::string& text) {
  std::vector<std::optional<QFormat>> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item == "stored") {
      out.push_back(std::nullopt);
      continue;
    }
    auto f = QFormatFromName(item);
    if (!f) return absl::InvalidArgumentError(absl::StrCat("--", flag, ": unknown format '", item, "'"));
    out.push_back(*f);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty"));
  return out;
}

std::vector<double> LogSoftmax(const float* l, int64_t n) {
  double m = l[0];
  for (int64_t i = 1; i < n; ++i) m = std::max(m, static_cast<double>(l[i]));
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(l[i] - m);
  std::vector<double> r(n);
  for (int64_t i = 0; i < n; ++i) r[i] = l[i] - m - std::log(s);
  return r;
}

absl::Status DoQuality(int argc, char** argv) {
  std::string model, goldens, experts = "stored,q8_row,q8_g64,q4_row,q4_g64,q2_row", dense = "stored,q8_row,q4_g64";
  std::string path = "auto", attention = "explicit";
  FlagSet flags("quality", "Quantization quality table against oracle goldens.");
  flags.AddString("kernel-path", &path, "integer-format kernel path: auto (int8-activation idot) or float");
  flags.AddString("model", &model, "model directory (HF checkpoint with goldens.json from tools/oracle)");
  flags.AddString("goldens", &goldens, "goldens file (default MODEL/goldens.json)");
  flags.AddString("experts", &experts, "routed-expert formats to try (stored = as in the checkpoint)");
  flags.AddString("dense", &dense, "dense-projection formats to try");
  flags.AddString("attention", &attention,
                  "attention path of the quantized runs: explicit (the default here: the table measures "
                  "quantization alone), absorbed, or auto (as served: absorbed once kv_b is integer)");
  MOE_RETURN_IF_ERROR(flags.Parse(argc, argv));
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return absl::OkStatus();
  }
  if (model.empty()) return absl::InvalidArgumentError("--model is required");
  if (goldens.empty()) goldens = model + "/goldens.json";
  MOE_ASSIGN_OR_RETURN(const AttentionPath attn, ParseAttentionFlag(attention));
  kernels::Path kpath = kernels::Path::kAuto;
  if (path == "float") {
    kpath = kernels::Path::kFloat;
  } else if (path == "idot") {
    kpath = kernels::Path::kIdot;
  } else if (path != "auto") {
    return absl::InvalidArgumentError("--kernel-path must be auto, idot or float");
  }
  MOE_ASSIGN_OR_RETURN(auto ef, ParseFormats("experts", experts));
  MOE_ASSIGN_OR_RETURN(auto df, ParseFormats("dense", dense));
  std::ifstream in(goldens);
  if (!in) return absl::NotFoundError(absl::StrCat(goldens, ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  auto g = nlohmann::json::parse(ss.str(), nullptr, false);
  if (g.is_discarded() || !g.contains("prompts")) return absl::InvalidArgumentError(absl::StrCat(goldens, ": not goldens"));

  // Reference distribution: the unquantized engine on the explicit path
  // (matches HF; see tests/model/oracle_test).
  EngineConfig ref_cfg;
  ref_cfg.attention = AttentionPath::kExplicit;
  MOE_ASSIGN_OR_RETURN(auto ref, Engine::Open(model, ref_cfg));
  const int64_t V = ref->config().vocab_size;
  std::vector<std::vector<float>> ref_logits;
  for (const auto& pr : g["prompts"]) {
    const auto ids = pr["teacher_forced"]["ids"].get<std::vector<int32_t>>();
    KvCache c = ref->NewCache();
    MOE_ASSIGN_OR_RETURN(auto f, ref->model().Forward(ids, c, true));
    ref_logits.push_back(f.logits);
  }
  std::printf("| experts | dense | greedy tokens equal | first divergence (min) | teacher-forced argmax equal | mean KL (nats) |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (const auto& e : ef) {
    for (const auto& d : df) {
      EngineConfig ec;
      ec.expert_format = e;
      ec.dense_format = d;
      ec.kernel_path = kpath;
      ec.attention = attn;
      MOE_ASSIGN_OR_RETURN(auto eng, Engine::Open(model, ec));
      int g_eq = 0, g_tot = 0, tf_eq = 0, tf_tot = 0, first_div = 1 << 30;
      double kl = 0;
      int64_t kl_n = 0;
      size_t pi = 0;
      for (const auto& pr : g["prompts"]) {
        const auto prompt = pr["ids"].get<std::vector<int32_t>>();
        const auto want = pr["greedy"]["tokens"].get<std::vector<int32_t>>();
        KvCache c = eng->NewCache();
        MOE_ASSIGN_OR_RETURN(auto r, eng->Generate(prompt, static_cast<int64_t>(want.size()), SamplingParams{}, c));
        int fd = static_cast<int>(want.size());
        for (size_t i = 0; i < want.size(); ++i) {
          const bool eq = i < r.tokens.size() && r.tokens[i] == want[i];
          g_eq += eq;
          if (!eq && fd == static_cast<int>(want.size())) fd = static_cast<int>(i);
        }
        first_div = std::min(first_div, fd);
        g_tot += static_cast<int>(want.size());
        const auto ids = pr["teacher_forced"]["ids"].get<std::vector<int32_t>>();
        const auto am = pr["teacher_forced"]["argmax"].get<std::vector<int32_t>>();
        KvCache c2 = eng->NewCache();
        MOE_ASSIGN_OR_RETURN(auto f, eng->model().Forward(ids, c2, true));
        for (size_t i = 0; i < ids.size(); ++i) {
          tf_eq += Argmax(f.logits.data() + i * V, V) == am[i];
          ++tf_tot;
          const auto p = LogSoftmax(ref_logits[pi].data() + i * V, V);
          const auto q = LogSoftmax(f.logits.data() + i * V, V);
          double k = 0;
          for (int64_t v = 0; v < V; ++v) k += std::exp(p[v]) * (p[v] - q[v]);
          kl += k;
          ++kl_n;
        }
        ++pi;
      }
      std::printf("| %s | %s | %d/%d | %d | %d/%d | %.5f |\n", e ? std::string(Name(*e)).c_str() : "bf16 (stored)",
                  d ? std::string(Name(*d)).c_str() : "bf16 (stored)", g_eq, g_tot, first_div, tf_eq, tf_tot,
                  kl / std::max<int64_t>(kl_n, 1));
      std::fflush(stdout);
    }
  }
  return absl::OkStatus();
}

}  // namespace

int RunQuality(int argc, char** argv) {
  if (auto s = DoQuality(argc, argv); !s.ok()) return Fail("quality", s);
  return 0;
}

}  // namespace moe::cli
