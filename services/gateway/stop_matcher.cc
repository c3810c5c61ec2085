#include "services/gateway/stop_matcher.h"

#include <algorithm>

namespace moe::gateway {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

StopMatcher::Result StopMatcher::Push(std::string_view piece) {
  Result r;
  if (stopped_) {
    r.stopped = true;
    return r;
  }
  held_.append(piece);
  if (stops_.empty()) {
    r.emit.swap(held_);
    return r;
  }
  // Earliest occurrence of any stop string. Everything before the held tail
  // was already proven match-free except for matches starting in the tail,
  // and held_ starts at the first undecided byte, so search all of held_.
  size_t best = std::string::npos;
  const std::string* which = nullptr;
  for (const auto& s : stops_) {
    size_t p = held_.find(s);
    if (p < best) {
      best = p;
      which = &s;
    }
  }
  if (best != std::string::npos) {
    r.emit = held_.substr(0, best);
    r.matched = *which;
    r.stopped = stopped_ = true;
    held_.clear();
    return r;
  }
  // Hold back the longest suffix that is a proper prefix of a stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    size_t max_k = std::min(held_.size(), s.size() - 1);
    for (size_t k = max_k; k > hold; --k) {
      if (std::string_view(held_).substr(held_.size() - k) == std::string_view(s).substr(0, k)) {
        hold = k;
        break;
      }
    }
  }
  r.emit = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return r;
}

std::string StopMatcher::Flush() {
  if (stopped_) return {};
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace moe::gateway
