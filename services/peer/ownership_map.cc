#include "services/peer/ownership_map.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/base/json.h"
#include "common/base/status.h"
#include "common/base/text_file.h"

namespace moe::peer {

int OwnershipMap::HostFor(int self, int layer, int expert) const {
  if (layer < 0 || layer >= static_cast<int>(owner.size())) return self;
  const std::vector<int>& row = owner[layer];
  if (expert < 0 || expert >= static_cast<int>(row.size())) return self;
  if (replicated[layer][expert]) return self;
  return row[expert];
}

std::vector<int64_t> OwnershipMap::OwnedCounts() const {
  std::vector<int64_t> n(hosts.size(), 0);
  for (size_t l = 0; l < owner.size(); ++l) {
    for (size_t e = 0; e < owner[l].size(); ++e) {
      if (!replicated[l][e]) ++n[owner[l][e]];
    }
  }
  return n;
}

absl::StatusOr<OwnershipMap> OwnershipMap::FromJson(const nlohmann::json& j) {
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(absl::StrCat("ownership map: ", what)); };
  if (!j.is_object()) return bad("not a JSON object");
  for (const auto& [k, v] : j.items()) {
    (void)v;
    static const std::set<std::string> known = {"format", "epoch", "weights", "hosts", "owner", "replicated"};
    if (!known.count(k)) return bad(absl::StrCat("unknown field '", k, "'"));
  }
  if (!j.contains("format") || j["format"] != kOwnershipFormat) {
    return bad(absl::StrCat("'format' must be \"", kOwnershipFormat, "\""));
  }
  OwnershipMap m;
  if (!j.contains("epoch") || !j["epoch"].is_number_unsigned() || j["epoch"].get<uint64_t>() < 1) {
    return bad("'epoch' must be an integer >= 1");
  }
  m.epoch = j["epoch"].get<uint64_t>();
  if (!j.contains("weights") || !j["weights"].is_string() || j["weights"].get<std::string>().empty()) {
    return bad("'weights' must name the model's weights identity");
  }
  m.weights = j["weights"].get<std::string>();
  if (!j.contains("hosts") || !j["hosts"].is_array() || j["hosts"].empty()) return bad("'hosts' must be a non-empty list");
  std::set<std::string> seen;
  for (const auto& h : j["hosts"]) {
    if (!h.is_string() || h.get<std::string>().empty()) return bad("'hosts' entries must be addresses (HOST:PORT)");
    if (!seen.insert(h.get<std::string>()).second) return bad(absl::StrCat("host '", h.get<std::string>(), "' listed twice"));
    m.hosts.push_back(h.get<std::string>());
  }
  if (!j.contains("owner") || !j["owner"].is_array()) return bad("'owner' must be a list of rows, one per layer");
  for (size_t l = 0; l < j["owner"].size(); ++l) {
    const auto& row = j["owner"][l];
    if (!row.is_array()) return bad(absl::StrCat("owner[", l, "] is not a list"));
    std::vector<int> r;
    for (size_t e = 0; e < row.size(); ++e) {
      if (!row[e].is_number_integer() || row[e].get<int64_t>() < 0 ||
          row[e].get<int64_t>() >= static_cast<int64_t>(m.hosts.size())) {
        return bad(absl::StrCat("owner[", l, "][", e, "] is not a host index (0..", m.hosts.size() - 1, ")"));
      }
      r.push_back(row[e].get<int>());
    }
    m.owner.push_back(std::move(r));
    m.replicated.emplace_back(m.owner.back().size(), 0);
  }
  if (j.contains("replicated")) {
    if (!j["replicated"].is_array()) return bad("'replicated' must be a list of [layer, expert]");
    for (const auto& p : j["replicated"]) {
      if (!p.is_array() || p.size() != 2 || !p[0].is_number_integer() || !p[1].is_number_integer()) {
        return bad("'replicated' entries must be [layer, expert]");
      }
      const int64_t l = p[0].get<int64_t>(), e = p[1].get<int64_t>();
      if (l < 0 || l >= static_cast<int64_t>(m.owner.size()) || e < 0 ||
          e >= static_cast<int64_t>(m.owner[l].size())) {
        return bad(absl::StrCat("replicated [", l, ", ", e, "] is outside 'owner'"));
      }
      m.replicated[l][e] = 1;
    }
  }
  return m;
}

absl::StatusOr<OwnershipMap> OwnershipMap::Load(const std::string& path) {
  absl::StatusOr<std::string> text = ReadTextFile(path);
  if (!text.ok()) return absl::NotFoundError(absl::StrCat("ownership map ", text.status().message()));
  auto j = ParseJson(*text);
  if (!j.ok()) return absl::InvalidArgumentError(absl::StrCat("ownership map ", path, ": ", j.status().message()));
  auto m = FromJson(*j);
  if (!m.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", m.status().message()));
  return m;
}

nlohmann::json OwnershipMap::ToJson() const {
  nlohmann::json rep = nlohmann::json::array();
  for (size_t l = 0; l < replicated.size(); ++l) {
    for (size_t e = 0; e < replicated[l].size(); ++e) {
      if (replicated[l][e]) rep.push_back({l, e});
    }
  }
  return {{"format", kOwnershipFormat}, {"epoch", epoch}, {"weights", weights},
          {"hosts", hosts},             {"owner", owner}, {"replicated", rep}};
}

absl::Status OwnershipMap::CheckModel(const std::string& weights_identity, const std::vector<bool>& moe_layers,
                                      int n_experts) const {
  if (weights != weights_identity) {
    return absl::FailedPreconditionError(absl::StrCat("ownership map is for weights '", weights,
                                                      "', this model's are '", weights_identity, "'"));
  }
  if (owner.size() != moe_layers.size()) {
    return absl::FailedPreconditionError(absl::StrCat("ownership map has ", owner.size(), " layer rows, the model ",
                                                      moe_layers.size(), " (MTP layer included)"));
  }
  for (size_t l = 0; l < owner.size(); ++l) {
    const size_t want = moe_layers[l] ? static_cast<size_t>(n_experts) : 0;
    if (owner[l].size() != want) {
      return absl::FailedPreconditionError(
          absl::StrCat("ownership map's layer ", l, " lists ", owner[l].size(), " experts, the model ", want));
    }
  }
  return absl::OkStatus();
}

OwnershipMap BalancedOwnership(const std::vector<std::string>& hosts, const std::vector<bool>& moe_layers,
                               int n_experts, const std::vector<std::vector<double>>& heat,
                               double replicate_share, uint64_t epoch, std::string weights) {
  OwnershipMap m;
  m.epoch = epoch;
  m.weights = std::move(weights);
  m.hosts = hosts;
  const int H = static_cast<int>(hosts.size());
  auto heat_of = [&](size_t l, int e) {
    return l < heat.size() && e < static_cast<int>(heat[l].size()) ? heat[l][e] : 0.0;
  };
  // The hottest replicate_share of all (layer, expert), by heat; ties by (layer, expert).
  std::vector<std::pair<int, int>> all;
  for (size_t l = 0; l < moe_layers.size(); ++l) {
    if (!moe_layers[l]) continue;
    for (int e = 0; e < n_experts; ++e) all.push_back({static_cast<int>(l), e});
  }
  std::stable_sort(all.begin(), all.end(),
                   [&](const auto& a, const auto& b) { return heat_of(a.first, a.second) > heat_of(b.first, b.second); });
  const size_t n_rep = H > 1 ? static_cast<size_t>(replicate_share * static_cast<double>(all.size())) : 0;
  m.owner.resize(moe_layers.size());
  m.replicated.resize(moe_layers.size());
  for (size_t l = 0; l < moe_layers.size(); ++l) {
    if (!moe_layers[l]) continue;
    m.owner[l].assign(n_experts, 0);
    m.replicated[l].assign(n_experts, 0);
  }
  for (size_t i = 0; i < n_rep && i < all.size(); ++i) m.replicated[all[i].first][all[i].second] = 1;
  for (size_t l = 0; l < moe_layers.size(); ++l) {
    if (!moe_layers[l]) continue;
    std::vector<int> order(n_experts);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return heat_of(l, a) > heat_of(l, b); });
    std::vector<double> load(H, 0);
    std::vector<int64_t> count(H, 0);
    for (int e : order) {
      if (m.replicated[l][e]) continue;
      // Least heat, then fewest experts (uniform heat: round robin), then lowest index.
      int best = 0;
      for (int h = 1; h < H; ++h) {
        if (load[h] < load[best] || (load[h] == load[best] && count[h] < count[best])) best = h;
      }
      m.owner[l][e] = best;
      load[best] += heat_of(l, e);
      ++count[best];
    }
  }
  return m;
}

}  // namespace moe::peer
