#include "common/expertstore/policy.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/base/atomic_file.h"
#include "common/base/status.h"

namespace moe::expertstore {
namespace {

constexpr uint64_t kHeatMagic = 0x3154414548454f4dull;  // "MOEHEAT1"
constexpr uint32_t kHeatVersion = 2;  // 2: + learned weights

struct HeatFileHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t num_layers;
  uint32_t num_experts;
  uint32_t reserved;
  char model_id[128];
};
static_assert(sizeof(HeatFileHeader) == 152);
static_assert(offsetof(HeatFileHeader, model_id) == 24);

}  // namespace

HeatPolicy::HeatPolicy(uint32_t num_layers, uint32_t num_experts, PolicyConfig c)
    : num_layers_(num_layers),
      num_experts_(num_experts),
      cfg_(c),
      slow_(size_t(num_layers) * num_experts, 0.0),
      fast_(slow_.size(), 0.0),
      last_(slow_.size(), 0),
      pinned_(slow_.size(), 0),
      expected_(slow_.size(), 0),
      quick_(slow_.size(), 0.0),
      long_(slow_.size(), 0.0),
      steady_(slow_.size(), 0.0),
      filled_(slow_.size(), 0),
      visit_start_(num_layers, 0),
      pending_(slow_.size(), -1),
      head_(num_layers, kNoHead),
      members_(num_layers),
      pos_(slow_.size(), -1),
      rank_(slow_.size(), 0.0),
      ranked_at_(num_layers, 0) {
  while (leaves_ < num_layers) leaves_ *= 2;
  tree_.assign(2 * leaves_, 0);
  for (uint32_t i = 0; i < leaves_; ++i) tree_[leaves_ + i] = std::min(i, num_layers > 0 ? num_layers - 1 : 0);
  for (uint32_t n = leaves_; n-- > 1;) tree_[n] = tree_[2 * n];
  double apt = cfg_.accesses_per_token > 0 ? cfg_.accesses_per_token : 600;
  slow_hl_ = apt * (cfg_.slow_tokens > 0 ? cfg_.slow_tokens : 128);
  fast_hl_ = apt * (cfg_.fast_tokens > 0 ? cfg_.fast_tokens : 2);
  window_ = cfg_.window_tokens > 0 ? apt * cfg_.window_tokens : 0;
  alpha_ = cfg_.alpha;
  quick_hl_ = apt * 4;
  long_hl_ = apt * 512;
  steady_hl_ = apt * (cfg_.steady_tokens > 0 ? cfg_.steady_tokens : 256);
  period_all_ = apt;
  period_.assign(num_layers, apt);
  UpdateClockWindows();
}

void HeatPolicy::UpdateClockWindows() {
  // Each count's window so far (all counts start at 0 at clock 0, or full
  // after a heat file): rate = count / window.
  constexpr double kLn2 = 0.6931471805599453;
  const double t = counts_full_ ? 1e300 : double(now_) + 1;
  window_slow_ = slow_hl_ / kLn2 * (1 - std::exp2(-t / slow_hl_));
  window_steady_ = steady_hl_ / kLn2 * (1 - std::exp2(-t / steady_hl_));
}

void HeatPolicy::Touch(uint32_t key, double count) {
  // The clock counts accesses (count > 1: harvested hits, one step each).
  now_ += count >= 1 ? static_cast<uint64_t>(count) : 1;
  UpdateClockWindows();
  const int layer = static_cast<int>(key / num_experts_);
  // A visit of this layer begins: another layer ran before this access, or
  // a token's worth of accesses went by in this one (a model with one routed
  // layer: each token is a visit).
  if (layer != cur_layer_ || double(now_ - visit_start_[uint32_t(layer)]) >= period_all_) {
    // The visit of cur_layer_ ended: its keys' scores as of now rank them
    // until its next visit (their recency steps start or stop here).
    if (cur_layer_ >= 0) RerankLayer(uint32_t(cur_layer_));
    if (visit_start_[layer] != 0) period_[layer] += (double(now_ - visit_start_[layer]) - period_[layer]) / 8;
    visit_start_[layer] = now_;
    cur_layer_ = layer;
    UpdateHead(uint32_t(layer));  // its look-ahead marks end here
  }
  if (pending_[key] >= 0) {  // this key's sample is answered: used again, in time or late
    Sample& s = samples_[size_t(pending_[key] - int64_t(samples_base_))];
    Learn(s.x, double(now_ - s.t0) <= Horizon() ? 1.0 : 0.0);
    s.live = false;
    pending_[key] = -1;
  }
  ExpireSamples();
  double dt = double(now_ - last_[key]);
  if (window_ > 0 && cfg_.adaptive_alpha && last_[key] != 0) {
    // The window opened by this key's previous access closes now (or closed
    // unused): was it reused, and how likely was that from the count alone?
    constexpr double kKeep = 1.0 - 1.0 / 65536;  // statistics over ~64K windows
    const double rate = slow_[key] * std::exp2(-dt / slow_hl_) * std::log(2.0) / slow_hl_;  // per access
    reuse_ = reuse_ * kKeep + (dt <= window_ ? 1.0 : 0.0);
    base_ = base_ * kKeep + (1.0 - std::exp(-rate * window_));
    windows_ = windows_ * kKeep + 1.0;
    if (windows_ > 256) {
      const double excess = std::max(0.0, (reuse_ - base_) / windows_);
      alpha_ = excess / window_ * slow_hl_ / std::log(2.0);
    }
  }
  slow_[key] = slow_[key] * std::exp2(-dt / slow_hl_) + count;
  fast_[key] = fast_[key] * std::exp2(-dt / fast_hl_) + count;
  quick_[key] = quick_[key] * std::exp2(-dt / quick_hl_) + count;
  long_[key] = long_[key] * std::exp2(-dt / long_hl_) + count;
  steady_[key] = steady_[key] * std::exp2(-dt / steady_hl_) + count;
  last_[key] = now_;
  if (pos_[key] >= 0) Rerank(key);
  // A layer not visited for two tokens is re-ranked all the same (one other
  // layer is checked per access, in turn), so its keys do not keep the
  // scores of their last use.
  stale_cursor_ = stale_cursor_ + 1 < num_layers_ ? stale_cursor_ + 1 : 0;
  if (double(now_ - ranked_at_[stale_cursor_]) > 2 * period_all_) RerankLayer(stale_cursor_);
}

void HeatPolicy::Rerank(uint32_t key) {
  auto& m = members_[key / num_experts_];
  size_t i = size_t(pos_[key]);
  rank_[key] = HeatScore(key);
  // Move it to its place; the others keep their order.
  while (i > 0 && RankedBefore(key, m[i - 1])) {
    m[i] = m[i - 1];
    pos_[m[i]] = int32_t(i);
    --i;
  }
  while (i + 1 < m.size() && RankedBefore(m[i + 1], key)) {
    m[i] = m[i + 1];
    pos_[m[i]] = int32_t(i);
    ++i;
  }
  m[i] = key;
  pos_[key] = int32_t(i);
  UpdateHead(key / num_experts_);
}

void HeatPolicy::UpdateHead(uint32_t layer) {
  const auto& m = members_[layer];
  uint32_t h = kNoHead;
  for (uint32_t k : m) {
    if (!pinned_[k] && !Expected(k)) {
      h = k;
      break;
    }
  }
  head_[layer] = h;
  for (uint32_t n = (leaves_ + layer) / 2; n >= 1; n /= 2) {
    const uint32_t a = tree_[2 * n], b = tree_[2 * n + 1];
    tree_[n] = HeadBefore(b, a) ? b : a;
  }
}

void HeatPolicy::Expect(uint32_t key) {
  expected_[key] = now_ + 1;
  if (pos_[key] >= 0 && head_[key / num_experts_] == key) UpdateHead(key / num_experts_);
}

void HeatPolicy::SetPinned(uint32_t key, bool pinned) {
  pinned_[key] = pinned;
  if (pos_[key] >= 0) UpdateHead(key / num_experts_);
}

void HeatPolicy::RerankLayer(uint32_t layer) {
  ranked_at_[layer] = now_;
  auto& m = members_[layer];
  if (m.empty()) return;
  for (uint32_t k : m) rank_[k] = HeatScore(k);
  std::sort(m.begin(), m.end(), [this](uint32_t a, uint32_t b) { return RankedBefore(a, b); });
  for (size_t i = 0; i < m.size(); ++i) pos_[m[i]] = int32_t(i);
  UpdateHead(layer);
}

void HeatPolicy::Filled(uint32_t key) {
  filled_[key] = now_;
  if (pos_[key] >= 0) return Rerank(key);
  auto& m = members_[key / num_experts_];
  rank_[key] = HeatScore(key);
  auto before = [this](uint32_t a, uint32_t b) { return RankedBefore(a, b); };
  const size_t i = size_t(std::upper_bound(m.begin(), m.end(), key, before) - m.begin());
  m.insert(m.begin() + long(i), key);
  for (size_t j = i; j < m.size(); ++j) pos_[m[j]] = int32_t(j);
  ++num_resident_;
  UpdateHead(key / num_experts_);
}

void HeatPolicy::Erase(uint32_t key) {
  if (pos_[key] < 0) return;
  auto& m = members_[key / num_experts_];
  const size_t i = size_t(pos_[key]);
  m.erase(m.begin() + long(i));
  for (size_t j = i; j < m.size(); ++j) pos_[m[j]] = int32_t(j);
  pos_[key] = -1;
  --num_resident_;
  UpdateHead(key / num_experts_);
}

void HeatPolicy::Removed(uint32_t key) { Erase(key); }

double HeatPolicy::Heat(uint32_t key) const { return slow_[key] * std::exp2(-double(now_ - last_[key]) / slow_hl_); }

void HeatPolicy::Features(uint32_t key, bool touched, double* x) const {
  const uint32_t layer = key / num_experts_;
  const double period = std::max(1.0, period_[layer]);
  const bool seen = touched || last_[key] != 0;
  const double dt = touched ? 0.0 : double(now_ - last_[key]);
  const double add = touched ? 1.0 : 0.0;
  x[0] = std::log1p(slow_[key] * std::exp2(-dt / slow_hl_) + add);
  x[1] = std::log1p(quick_[key] * std::exp2(-dt / quick_hl_) + add);
  x[2] = seen && dt <= period ? 1.0 : 0.0;  // used in its layer's last visit
  x[3] = seen ? std::min(8.0, std::log1p(dt / period)) : 8.0;
  // How far away the layer's next visit is, in periods: a key of the layer
  // just visited is needed last (the whole cycle of layers comes first).
  double d = int(layer) == cur_layer_ ? period : double(visit_start_[layer]) + period - double(now_);
  x[4] = std::clamp(d / period, 0.0, 1.0);
  x[5] = x[2] * x[4];
  x[6] = 1.0;
  x[7] = std::log1p(long_[key] * std::exp2(-dt / long_hl_) + add);
  x[8] = (slow_[key] * std::exp2(-dt / slow_hl_) + add) / 16;
}

double HeatPolicy::Logit(const double* x) const {
  double z = 0;
  for (int i = 0; i < kFeatures; ++i) z += w_[i] * x[i];
  return z;
}

void HeatPolicy::Learn(const double* x, double label) {
  const double z = Logit(x);
  const double p = 1.0 / (1.0 + std::exp(-std::clamp(z, -30.0, 30.0)));
  for (int i = 0; i < kFeatures; ++i) w_[i] += cfg_.learn_rate * (label - p) * x[i];
}

void HeatPolicy::ExpireSamples() {
  const double h = Horizon();
  while (!samples_.empty() && (!samples_.front().live || double(now_ - samples_.front().t0) > h)) {
    Sample& s = samples_.front();
    if (s.live) {  // not used within the horizon
      Learn(s.x, 0.0);
      pending_[s.key] = -1;
    }
    samples_.pop_front();
    ++samples_base_;
  }
}

void HeatPolicy::Observe(uint32_t key) {
  constexpr size_t kMaxSamples = 8192;
  if (!cfg_.learned || pending_[key] >= 0 || samples_.size() >= kMaxSamples) return;
  Sample s{key, now_, true, {}};
  Features(key, false, s.x);
  pending_[key] = int64_t(samples_base_ + samples_.size());
  samples_.push_back(s);
}

void HeatPolicy::Evicted(uint32_t key) {
  const double age = double(now_ - filled_[key]);
  horizon_ = horizon_ == 0 ? age : horizon_ + (age - horizon_) / 256;
  Erase(key);
}

double HeatPolicy::Score(uint32_t key) const {
  const double bonus = Expected(key) ? kExpectedBonus : 0.0;
  if (cfg_.learned) {
    double x[kFeatures];
    Features(key, false, x);
    return Logit(x) + bonus;
  }
  return (pos_[key] >= 0 ? rank_[key] : HeatScore(key)) + bonus;
}

double HeatPolicy::Freq(uint32_t key, double add) const {
  const double dt = double(now_ - last_[key]);
  const double cs = slow_[key] * std::exp2(-dt / slow_hl_) + add;
  if (cfg_.change_z <= 0) return cs;
  const double cl = steady_[key] * std::exp2(-dt / steady_hl_) + add;
  constexpr double kLn2 = 0.6931471805599453;
  const double ws = window_slow_, wl = window_steady_;
  const double expect = cl / wl * ws;  // the slow count the steady rate predicts
  const double full = slow_hl_ / kLn2;  // in slow-count units, as the recency bonus
  if (std::abs(cs - expect) <= cfg_.change_z * std::sqrt(expect + 0.25) + 0.5) return cl / wl * full;
  return cs / ws * full;
}

double HeatPolicy::HeatScore(uint32_t key) const {
  const double dt = double(now_ - last_[key]);
  const double freq = Freq(key, 0);
  if (window_ > 0) return freq + (last_[key] != 0 && dt <= window_ ? alpha_ : 0.0);
  return freq + cfg_.alpha * fast_[key] * std::exp2(-dt / fast_hl_);
}

double HeatPolicy::ScoreIfTouched(uint32_t key) const {
  if (cfg_.learned) {
    double x[kFeatures];
    Features(key, true, x);
    return Logit(x);
  }
  const double dt = double(now_ - last_[key]);
  const double slow = Freq(key, 1.0);
  if (window_ > 0) return slow + alpha_;
  return slow + cfg_.alpha * (fast_[key] * std::exp2(-dt / fast_hl_) + 1.0);
}

std::string HeatPolicy::Snapshot(const std::string& model_id) const {
  HeatFileHeader h{};
  h.magic = kHeatMagic;
  h.version = kHeatVersion;
  h.num_layers = num_layers_;
  h.num_experts = num_experts_;
  std::strncpy(h.model_id, model_id.c_str(), sizeof(h.model_id) - 1);
  // The frequency term only, decayed to now; recency does not survive a
  // restart. (Persisting the 256/512-token counts and the recency bonus too
  // changed warm-started replays by -2..+2 points: not kept.)
  const size_t n = slow_.size();
  std::vector<double> heat(n);
  for (uint32_t k = 0; k < n; ++k) heat[k] = slow_[k] * std::exp2(-double(now_ - last_[k]) / slow_hl_);
  std::string out;
  out.reserve(sizeof h + n * 9 + sizeof w_);
  auto put = [&out](const void* p, size_t bytes) { out.append(static_cast<const char*>(p), bytes); };
  put(&h, sizeof h);
  put(heat.data(), n * 8);
  put(pinned_.data(), n);
  put(w_, sizeof w_);
  return out;
}

absl::Status HeatPolicy::Save(const std::string& path, const std::string& model_id) const {
  return Annotate(WriteFileAtomically(path, Snapshot(model_id)), "heat file");
}

absl::Status HeatPolicy::Load(const std::string& path, const std::string& model_id) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("heat file ", path, ": cannot open"));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return Restore(bytes, model_id, absl::StrCat("heat file ", path));
}

absl::Status HeatPolicy::Restore(std::string_view bytes, const std::string& model_id, const std::string& source) {
  HeatFileHeader h{};
  if (bytes.size() < sizeof h) return absl::DataLossError(absl::StrCat(source, ": bad magic"));
  std::memcpy(&h, bytes.data(), sizeof h);
  if (h.magic != kHeatMagic) return absl::DataLossError(absl::StrCat(source, ": bad magic"));
  if (h.version != kHeatVersion)
    return absl::FailedPreconditionError(
        absl::StrCat(source, ": version ", h.version, ", this expertd reads version ", kHeatVersion));
  h.model_id[sizeof(h.model_id) - 1] = 0;
  if (model_id != h.model_id)
    return absl::FailedPreconditionError(
        absl::StrCat(source, " belongs to model '", h.model_id, "', not '", model_id, "'"));
  if (h.num_layers != num_layers_ || h.num_experts != num_experts_)
    return absl::FailedPreconditionError(absl::StrCat(source, ": shape ", h.num_layers, "x", h.num_experts,
                                                      " differs from ", num_layers_, "x", num_experts_));
  const size_t n = slow_.size();
  const size_t want = sizeof h + n * 9 + sizeof w_;
  if (bytes.size() != want)
    return absl::DataLossError(absl::StrCat(source, ": ", bytes.size(), " bytes where this shape has ", want,
                                            bytes.size() < want ? " (truncated)" : ""));
  std::vector<double> heat(n);
  std::vector<uint8_t> pinned(n);
  double w[kFeatures];
  const char* at = bytes.data() + sizeof h;
  std::memcpy(heat.data(), at, n * 8);
  std::memcpy(pinned.data(), at + n * 8, n);
  std::memcpy(w, at + n * 9, sizeof w);
  for (double v : heat) {
    if (!(v >= 0 && v < 1e300)) return absl::DataLossError(absl::StrCat(source, ": bad heat value"));
  }
  for (double v : w) {
    if (!std::isfinite(v)) return absl::DataLossError(absl::StrCat(source, ": bad model weight"));
  }
  std::copy(w, w + kFeatures, w_);
  counts_full_ = true;
  UpdateClockWindows();
  for (size_t k = 0; k < n; ++k) {
    slow_[k] = heat[k];
    // The other counts restart from the same estimate of the rate.
    quick_[k] = heat[k] * quick_hl_ / slow_hl_;
    long_[k] = heat[k] * long_hl_ / slow_hl_;
    steady_[k] = heat[k] * steady_hl_ / slow_hl_;
    fast_[k] = 0;
    last_[k] = now_;
    pinned_[k] = pinned[k] ? 1 : 0;
  }
  for (uint32_t l = 0; l < num_layers_; ++l) RerankLayer(l);
  return absl::OkStatus();
}

}  // namespace moe::expertstore
