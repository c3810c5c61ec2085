// moe heat --expertd ADDR [--json] [--png FILE] [--pin L:E] [--unpin L:E] [--budget BYTES]
// expertd's admin client: per-tier stats, per-(layer, expert) heat and
// placement, pin/unpin, budget change, and a heat-map PNG (rows = layers,
// columns = experts; brightness = heat, green = resident in RAM, blue =
// being read, white border dot = pinned).
#include <cmath>
#include <cstdio>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/base/flags.h"
#include "common/base/status.h"
#include "nlohmann/json.hpp"
#include "services/expertd_client/client.h"
#include "tools/moe/commands.h"
#include "tools/moe/cmd_heat_png.h"

namespace moe::cli {
namespace {

absl::Status ParseKey(const std::string& s, int* layer, int* expert) {
  std::vector<std::string> p = absl::StrSplit(s, ':');
  if (p.size() != 2 || !absl::SimpleAtoi(p[0], layer) || !absl::SimpleAtoi(p[1], expert))
    return absl::InvalidArgumentError("expected LAYER:EXPERT, got '" + s + "'");
  return absl::OkStatus();
}

absl::Status HeatPng(const expertd::HeatReply& h, const std::string& path) {
  const uint32_t L = h.num_layers(), E = h.num_experts(), cell = 3;
  double maxh = 0;
  for (double v : h.heat()) maxh = std::max(maxh, v);
  uint32_t W = E * cell, H = L * cell;
  std::vector<uint8_t> rgb(size_t(W) * H * 3, 0);
  for (uint32_t l = 0; l < L; ++l) {
    for (uint32_t e = 0; e < E; ++e) {
      size_t k = size_t(l) * E + e;
      double v = maxh > 0 ? std::sqrt(h.heat(int(k)) / maxh) : 0;
      uint8_t r = static_cast<uint8_t>(255 * v), g = static_cast<uint8_t>(80 * v), b = 0;
      uint32_t pl = h.placement(int(k));
      if (pl & 1u) g = static_cast<uint8_t>(std::min(255.0, 120 + 135 * v));
      if (pl & 2u) b = 255;
      for (uint32_t y = 0; y < cell; ++y) {
        for (uint32_t x = 0; x < cell; ++x) {
          size_t p = (size_t(l * cell + y) * W + e * cell + x) * 3;
          bool dot = (pl & 4u) && x == 1 && y == 1;
          rgb[p] = dot ? 255 : r;
          rgb[p + 1] = dot ? 255 : g;
          rgb[p + 2] = dot ? 255 : b;
        }
      }
    }
  }
  return WritePng(path, W, H, rgb);
}

}  // namespace

int RunHeat(int argc, char** argv) {
  std::string addr, png, pin, unpin;
  bool json = false;
  uint64_t budget = 0;
  int64_t top = 10;
  FlagSet flags("heat", "Show expertd's tiers, hit rates and expert heat; pin/unpin; change the budget.");
  flags.AddString("expertd", &addr, "expertd unix socket path");
  flags.AddBool("json", &json, "print JSON (stats + full heat table)");
  flags.AddString("png", &png, "write a heat-map PNG (layers x experts)");
  flags.AddString("pin", &pin, "pin LAYER:EXPERT (never evicted)");
  flags.AddString("unpin", &unpin, "unpin LAYER:EXPERT");
  flags.AddBytes("budget", &budget, "change the active budget (<= the arena sized at start)");
  flags.AddInt("top", &top, "hottest experts to list");
  if (auto s = flags.Parse(argc, argv); !s.ok()) return Fail("heat", s);
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (addr.empty()) return Fail("heat", absl::InvalidArgumentError("--expertd ADDR is required"));
  auto c = expertd::ExpertdClient::ConnectAdmin(addr);
  if (!c.ok()) return Fail("heat", c.status());
  for (auto [flag, on] : {std::pair{&pin, true}, std::pair{&unpin, false}}) {
    if (flag->empty()) continue;
    int l, e;
    if (auto s = ParseKey(*flag, &l, &e); !s.ok()) return Fail("heat", s);
    if (auto s = (*c)->Pin(l, e, on); !s.ok()) return Fail("heat", s);
  }
  if (flags.WasSet("budget")) {
    auto b = (*c)->SetBudget(budget);
    if (!b.ok()) return Fail("heat", b.status());
  }
  auto st = (*c)->Stats();
  if (!st.ok()) return Fail("heat", Annotate(st.status(), "expertd at " + addr));
  auto h = (*c)->Heat();
  if (!h.ok()) return Fail("heat", h.status());
  if (!png.empty()) {
    if (auto s = HeatPng(*h, png); !s.ok()) return Fail("heat", s);
  }
  const uint32_t E = h->num_experts();
  std::vector<size_t> order(h->heat_size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return h->heat(int(a)) > h->heat(int(b)); });
  if (json) {
    nlohmann::json j;
    j["model_id"] = st->model_id();
    for (const auto& t : st->tiers()) j["tiers"][t.tier()] = {{"hits", t.hits()}, {"bytes", t.bytes()}};
    j["requests"] = st->requests();
    j["shm_hits"] = st->shm_hits();
    j["evictions"] = st->evictions();
    j["read_errors"] = st->read_errors();
    j["prefetch"] = {{"issued", st->prefetch_issued()}, {"used", st->prefetch_used()},
                     {"refused", st->prefetch_refused()}, {"promoted", st->prefetch_promoted()},
                     {"gated", st->prefetch_gated()}, {"lookahead_kept", st->lookahead_kept()},
                     {"gate_open", st->prefetch_gate_open()},
                     {"precision", st->prefetch_precision()}, {"demand_busy", st->demand_busy()}};
    j["policy"] = {{"order", st->policy()},
                   {"weights", std::vector<double>(st->policy_weights().begin(), st->policy_weights().end())},
                   {"horizon_tokens", st->policy_horizon_tokens()}};
    j["slabs"] = {{"total", st->slabs_total()}, {"active", st->slabs_active()}, {"ready", st->slabs_ready()},
                  {"filling", st->slabs_filling()}, {"leased", st->slabs_leased()}};
    j["bytes"] = {{"arena", st->arena_bytes()}, {"budget", st->budget_bytes()}, {"resident", st->resident_bytes()}};
    j["sessions"] = st->sessions();
    j["io"] = {{"engine", st->io_engine()}, {"queue_depth", st->queue_depth()}, {"inflight", st->io_inflight()},
               {"read_gbps", st->read_gbps()}};
    nlohmann::json experts = nlohmann::json::array();
    for (int i = 0; i < h->heat_size(); ++i) {
      if (h->heat(i) == 0 && h->placement(i) == 0) continue;
      experts.push_back({{"layer", i / E}, {"expert", i % E}, {"heat", h->heat(i)},
                         {"resident", (h->placement(i) & 1u) != 0}, {"filling", (h->placement(i) & 2u) != 0},
                         {"pinned", (h->placement(i) & 4u) != 0}, {"leases", h->leases(i)}});
    }
    j["experts"] = experts;
    std::printf("%s\n", j.dump(1).c_str());
    return 0;
  }
  std::printf("expertd %s  model %s  sessions %u\n", addr.c_str(), st->model_id().c_str(), st->sessions());
  std::printf("arena %.1f MiB  budget %.1f MiB  resident %.1f MiB  slabs %lu/%lu ready, %lu leased, %lu filling\n",
              st->arena_bytes() / 1048576.0, st->budget_bytes() / 1048576.0, st->resident_bytes() / 1048576.0,
              (unsigned long)st->slabs_ready(), (unsigned long)st->slabs_active(), (unsigned long)st->slabs_leased(),
              (unsigned long)st->slabs_filling());
  uint64_t total = 0;
  for (const auto& t : st->tiers()) total += t.hits();
  for (const auto& t : st->tiers())
    std::printf("  %-9s %10lu hits (%5.1f%%)  %10.1f MiB\n", t.tier().c_str(), (unsigned long)t.hits(),
                total ? 100.0 * t.hits() / total : 0.0, t.bytes() / 1048576.0);
  std::printf("io %s qd %u  in flight %lu  read %.2f GB/s  errors %lu  evictions %lu\n", st->io_engine().c_str(),
              st->queue_depth(), (unsigned long)st->io_inflight(), st->read_gbps(), (unsigned long)st->read_errors(),
              (unsigned long)st->evictions());
  std::printf("prefetch issued %lu used %lu refused %lu promoted %lu gated %lu kept %lu; gate %s (precision %.2f, demand busy %.2f)\n",
              (unsigned long)st->prefetch_issued(), (unsigned long)st->prefetch_used(),
              (unsigned long)st->prefetch_refused(), (unsigned long)st->prefetch_promoted(),
              (unsigned long)st->prefetch_gated(), (unsigned long)st->lookahead_kept(), st->prefetch_gate_open() ? "open" : "closed",
              st->prefetch_precision(), st->demand_busy());
  std::printf("policy %s", st->policy().c_str());
  if (st->policy_weights_size() > 0) {
    std::printf(" (horizon %.1f tokens; weights", st->policy_horizon_tokens());
    for (double w : st->policy_weights()) std::printf(" %.2f", w);
    std::printf(")");
  }
  std::printf("\n");
  std::printf("hottest experts:\n");
  for (int i = 0; i < top && i < int(order.size()) && h->heat(int(order[i])) > 0; ++i) {
    size_t k = order[i];
    uint32_t pl = h->placement(int(k));
    std::printf("  layer %3zu expert %3zu  heat %8.2f  %s%s%s\n", k / E, k % E, h->heat(int(k)),
                (pl & 1u) ? "ram" : (pl & 2u) ? "reading" : "disk", (pl & 4u) ? " pinned" : "",
                h->leases(int(k)) ? " leased" : "");
  }
  if (!png.empty()) std::printf("heat map: %s\n", png.c_str());
  return 0;
}

}  // namespace moe::cli
