// moe ownership --model DIR --hosts ADDR,ADDR[,...] [--epoch N] [--heat FILE] [--replicate-share 0.01] --out FILE
//
// Writes the ownership map of an expert-parallel group (services/peer/
// ownership_map.h, docs/MULTIHOST.md): every routed (layer, expert) of the
// model given to one host, balanced per layer by heat (`moe heat --json` of
// a running expertd; without it every expert weighs the same: round robin),
// the hottest --replicate-share of all experts replicated on every host.
// Give every host of the group the same file and its own --host-index.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/atomic_file.h"
#include "common/base/flags.h"
#include "common/base/json.h"
#include "common/base/text_file.h"
#include "common/format/model_config.h"
#include "services/inferd/engine_identity.h"
#include "services/peer/ownership_map.h"
#include "services/peer/peer_flags.h"
#include "tools/moe/commands.h"

namespace moe::cli {

namespace {

absl::StatusOr<std::vector<std::vector<double>>> LoadHeat(const std::string& path, int layers, int experts) {
  absl::StatusOr<std::string> text = ReadTextFile(path);
  if (!text.ok()) return absl::NotFoundError(absl::StrCat("--heat ", text.status().message()));
  auto j = ParseJson(*text);
  if (!j.ok()) return absl::InvalidArgumentError(absl::StrCat("--heat ", path, ": ", j.status().message()));
  if (!j->is_object() || !j->contains("experts") || !(*j)["experts"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat("--heat ", path, ": no 'experts' list (moe heat --json's output)"));
  }
  std::vector<std::vector<double>> heat(layers, std::vector<double>(experts, 0.0));
  for (const auto& e : (*j)["experts"]) {
    if (!e.is_object() || !e.contains("layer") || !e.contains("expert") || !e.contains("heat") ||
        !e["layer"].is_number_integer() || !e["expert"].is_number_integer() || !e["heat"].is_number()) {
      return absl::InvalidArgumentError(absl::StrCat("--heat ", path, ": an entry lacks integer layer/expert, heat"));
    }
    const int64_t l = e["layer"].get<int64_t>(), x = e["expert"].get<int64_t>();
    if (l < 0 || l >= layers || x < 0 || x >= experts) {
      return absl::InvalidArgumentError(absl::StrCat("--heat ", path, ": (layer ", l, ", expert ", x,
                                                     ") is outside the model"));
    }
    heat[l][x] = e["heat"].get<double>();
  }
  return heat;
}

}  // namespace

int RunOwnership(int argc, char** argv) {
  std::string model, hosts_s, heat_file, out;
  int64_t epoch = 1;
  double replicate = 0.0;
  FlagSet flags("moe ownership", "the (layer, expert) -> host map of an expert-parallel group (inferd --ownership-map)");
  flags.AddString("model", &model, "model directory (the container every host holds)");
  flags.AddString("hosts", &hosts_s, "the hosts' peer addresses (inferd --peer-listen), comma-separated, in index order");
  flags.AddInt("epoch", &epoch, "the map's epoch (>= 1; raise it for every new map of a group)");
  flags.AddString("heat", &heat_file, "expert heat to balance by (moe heat --json of a running expertd)");
  flags.AddDouble("replicate-share", &replicate, "share of all routed experts, hottest first, every host computes itself");
  flags.AddString("out", &out, "where to write the map (JSON)");
  if (auto st = flags.Parse(argc, argv); !st.ok()) return Fail("ownership", st);
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (model.empty() || hosts_s.empty() || out.empty()) {
    return Fail("ownership", absl::InvalidArgumentError("--model, --hosts and --out are required"));
  }
  if (epoch < 1 || !(replicate >= 0 && replicate <= 1)) {
    return Fail("ownership", absl::InvalidArgumentError("--epoch >= 1 and 0 <= --replicate-share <= 1"));
  }
  std::vector<std::string> hosts = absl::StrSplit(hosts_s, ',');
  auto cfg = LoadModelConfig(model);
  if (!cfg.ok()) return Fail("ownership", cfg.status());
  auto weights = inferd::WeightsIdentity(model);
  if (!weights.ok()) return Fail("ownership", weights.status());
  const std::vector<bool> moe_layers = peer::MoeLayers(*cfg);
  std::vector<std::vector<double>> heat;
  if (!heat_file.empty()) {
    auto h = LoadHeat(heat_file, static_cast<int>(moe_layers.size()), cfg->n_routed_experts);
    if (!h.ok()) return Fail("ownership", h.status());
    heat = std::move(*h);
  }
  peer::OwnershipMap m = peer::BalancedOwnership(hosts, moe_layers, cfg->n_routed_experts, heat, replicate,
                                                 static_cast<uint64_t>(epoch), *weights);
  // The written map must load back: the same checks inferd applies.
  if (auto back = peer::OwnershipMap::FromJson(m.ToJson()); !back.ok()) return Fail("ownership", back.status());
  if (auto st = WriteFileAtomically(out, m.ToJson().dump(1) + "\n"); !st.ok()) return Fail("ownership", st);
  const std::vector<int64_t> owned = m.OwnedCounts();
  std::printf("ownership map %s: epoch %lld, %zu hosts, weights %s\n", out.c_str(), static_cast<long long>(epoch),
              hosts.size(), weights->c_str());
  for (size_t h = 0; h < hosts.size(); ++h) {
    std::printf("  host %zu %s: %lld experts\n", h, hosts[h].c_str(), static_cast<long long>(owned[h]));
  }
  return 0;
}

}  // namespace moe::cli
