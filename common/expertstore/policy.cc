#include "common/expertstore/policy.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"

namespace moe::expertstore {
namespace {

constexpr uint64_t kHeatMagic = 0x3154414548454f4dull;  // "MOEHEAT1"
constexpr uint32_t kHeatVersion = 1;

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
      pinned_(slow_.size(), 0) {
  double apt = cfg_.accesses_per_token > 0 ? cfg_.accesses_per_token : 600;
  slow_hl_ = apt * (cfg_.slow_tokens > 0 ? cfg_.slow_tokens : 128);
  fast_hl_ = apt * (cfg_.fast_tokens > 0 ? cfg_.fast_tokens : 2);
  window_ = cfg_.window_tokens > 0 ? apt * cfg_.window_tokens : 0;
  alpha_ = cfg_.alpha;
}

void HeatPolicy::Touch(uint32_t key, double count) {
  ++now_;
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
  last_[key] = now_;
}

double HeatPolicy::Score(uint32_t key) const {
  double dt = double(now_ - last_[key]);
  if (window_ > 0) return slow_[key] * std::exp2(-dt / slow_hl_) + (last_[key] != 0 && dt <= window_ ? alpha_ : 0.0);
  return slow_[key] * std::exp2(-dt / slow_hl_) + cfg_.alpha * fast_[key] * std::exp2(-dt / fast_hl_);
}

double HeatPolicy::ScoreIfTouched(uint32_t key) const {
  const double dt = double(now_ - last_[key]);
  const double slow = slow_[key] * std::exp2(-dt / slow_hl_) + 1.0;
  if (window_ > 0) return slow + alpha_;
  return slow + cfg_.alpha * (fast_[key] * std::exp2(-dt / fast_hl_) + 1.0);
}

absl::Status HeatPolicy::Save(const std::string& path, const std::string& model_id) const {
  HeatFileHeader h{};
  h.magic = kHeatMagic;
  h.version = kHeatVersion;
  h.num_layers = num_layers_;
  h.num_experts = num_experts_;
  std::strncpy(h.model_id, model_id.c_str(), sizeof(h.model_id) - 1);
  // Persist the slow (frequency) term only; recency does not survive a restart.
  std::vector<double> heat(slow_.size());
  for (uint32_t k = 0; k < heat.size(); ++k) heat[k] = slow_[k] * std::exp2(-double(now_ - last_[k]) / slow_hl_);
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat("heat file ", tmp, ": cannot create"));
  bool ok = ::write(fd, &h, sizeof h) == ssize_t(sizeof h) &&
            ::write(fd, heat.data(), heat.size() * 8) == ssize_t(heat.size() * 8) &&
            ::write(fd, pinned_.data(), pinned_.size()) == ssize_t(pinned_.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0)
    return absl::InternalError(absl::StrCat("heat file ", path, ": write failed"));
  return absl::OkStatus();
}

absl::Status HeatPolicy::Load(const std::string& path, const std::string& model_id) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("heat file ", path, ": cannot open"));
  HeatFileHeader h{};
  if (!in.read(reinterpret_cast<char*>(&h), sizeof h) || h.magic != kHeatMagic)
    return absl::DataLossError(absl::StrCat("heat file ", path, ": bad magic"));
  if (h.version != kHeatVersion)
    return absl::FailedPreconditionError(absl::StrCat("heat file ", path, ": version ", h.version));
  h.model_id[sizeof(h.model_id) - 1] = 0;
  if (model_id != h.model_id)
    return absl::FailedPreconditionError(
        absl::StrCat("heat file ", path, " belongs to model '", h.model_id, "', not '", model_id, "'"));
  if (h.num_layers != num_layers_ || h.num_experts != num_experts_)
    return absl::FailedPreconditionError(absl::StrCat("heat file ", path, ": shape ", h.num_layers, "x",
                                                      h.num_experts, " differs from ", num_layers_, "x",
                                                      num_experts_));
  std::vector<double> heat(slow_.size());
  std::vector<uint8_t> pinned(slow_.size());
  if (!in.read(reinterpret_cast<char*>(heat.data()), heat.size() * 8) ||
      !in.read(reinterpret_cast<char*>(pinned.data()), pinned.size()))
    return absl::DataLossError(absl::StrCat("heat file ", path, ": truncated"));
  for (uint32_t k = 0; k < heat.size(); ++k) {
    if (!(heat[k] >= 0 && heat[k] < 1e300))
      return absl::DataLossError(absl::StrCat("heat file ", path, ": bad heat value"));
  }
  for (uint32_t k = 0; k < heat.size(); ++k) {
    slow_[k] = heat[k];
    fast_[k] = 0;
    last_[k] = now_;
    pinned_[k] = pinned[k] ? 1 : 0;
  }
  return absl::OkStatus();
}

}  // namespace moe::expertstore
