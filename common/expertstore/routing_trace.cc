#include "common/expertstore/routing_trace.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/atomic_file.h"
#include "common/base/status.h"

namespace moe::expertstore {

void AppendRow(RoutingTrace& t, int64_t position, uint32_t layer, std::span<const uint32_t> experts,
               std::span<const uint32_t> predicted) {
  const size_t rows = t.row_positions.size();
  const bool same_token = rows > 0 && t.row_positions.back() == position;
  if (!same_token) ++t.num_tokens;
  if (!predicted.empty() && same_token && t.ahead.empty()) t.ahead.assign(rows, {});
  if (!t.ahead.empty()) {
    t.ahead.emplace_back();  // this row's own look-ahead (for the next row), if one comes
    if (same_token)
      for (uint32_t e : predicted) t.ahead[rows - 1].push_back(layer * t.num_experts + e);
  }
  t.row_positions.push_back(position);
  for (uint32_t e : experts) t.keys.push_back(layer * t.num_experts + e);
}

absl::Status SaveTrace(const RoutingTrace& t, const std::string& path) {
  std::ostringstream out;
  const bool ahead = !t.ahead.empty();
  out << "moestream-routing-trace " << (ahead ? 2 : 1) << " " << t.num_layers << " " << t.num_experts << " "
      << t.top_k << "\n";
  const size_t K = std::max<uint32_t>(1, t.top_k), rows = t.keys.size() / K;
  for (size_t r = 0; r < rows; ++r) {
    const uint32_t layer = t.keys[r * K] / t.num_experts;
    const int64_t pos = r < t.row_positions.size() ? t.row_positions[r] : int64_t(r / std::max<uint32_t>(1, t.num_layers));
    if (ahead && r > 0 && r - 1 < t.ahead.size() && !t.ahead[r - 1].empty()) {
      out << "+ " << pos << " " << layer;  // the look-ahead's prediction for this row
      for (uint32_t k : t.ahead[r - 1]) out << " " << k % t.num_experts;
      out << "\n";
    }
    out << pos << " " << layer;
    for (size_t k = 0; k < K; ++k) out << " " << t.keys[r * K + k] % t.num_experts;
    out << "\n";
  }
  return Annotate(WriteFileAtomically(path, out.str()), "trace");
}

absl::StatusOr<RoutingTrace> LoadTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("trace ", path, ": cannot open"));
  RoutingTrace t;
  std::string magic, line;
  int version = 0;
  if (!(in >> magic >> version >> t.num_layers >> t.num_experts >> t.top_k) || magic != "moestream-routing-trace" ||
      (version != 1 && version != 2) || t.num_layers == 0 || t.num_experts == 0 || t.top_k == 0)
    return absl::InvalidArgumentError(absl::StrCat("trace ", path, ": not a version 1 or 2 routing trace"));
  std::getline(in, line);
  size_t lineno = 1;
  struct Row {
    int64_t pos;
    uint32_t layer;
    std::vector<uint32_t> experts;
  };
  std::vector<Row> rows;
  std::map<std::pair<int64_t, uint32_t>, std::vector<uint32_t>> predicted;  // version 2 "+" lines
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    const bool plus = line[0] == '+';
    if (plus && version < 2)
      return absl::InvalidArgumentError(absl::StrCat("trace ", path, " line ", lineno,
                                                     ": look-ahead lines need a version 2 trace"));
    if (plus) ls.get();
    int64_t pos;
    uint32_t layer, e;
    if (!(ls >> pos >> layer) || layer >= t.num_layers)
      return absl::InvalidArgumentError(absl::StrCat("trace ", path, " line ", lineno, ": bad token/layer"));
    std::vector<uint32_t> ids;
    while (ls >> e) {
      if (e >= t.num_experts)
        return absl::InvalidArgumentError(absl::StrCat("trace ", path, " line ", lineno, ": expert ", e,
                                                       " out of range"));
      ids.push_back(e);
    }
    if (plus) {  // + <token> <layer> <predicted experts>: the look-ahead for that row
      predicted[{pos, layer}] = std::move(ids);
      continue;
    }
    if (ids.size() != t.top_k)
      return absl::InvalidArgumentError(absl::StrCat("trace ", path, " line ", lineno, ": ", ids.size(),
                                                     " experts where the header says top-", t.top_k));
    rows.push_back({pos, layer, std::move(ids)});
  }
  for (const Row& r : rows) {
    auto it = predicted.find({r.pos, r.layer});
    AppendRow(t, r.pos, r.layer, r.experts,
              it != predicted.end() ? std::span<const uint32_t>(it->second) : std::span<const uint32_t>());
  }
  return t;
}

double AccessesPerToken(const RoutingTrace& t) {
  if (t.num_tokens > 0 && !t.keys.empty()) return double(t.keys.size()) / t.num_tokens;
  return double(t.num_layers) * t.top_k;
}

}  // namespace moe::expertstore
