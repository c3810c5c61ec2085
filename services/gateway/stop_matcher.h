// Incremental stop-string matcher over a stream of decoded text pieces.
//
// Problem: a stop string may span token boundaries ("\n\nUser:" arriving as
// "\n", "\nUs", "er:"), and nothing of it may reach the client. Each Push()
// returns only text that can no longer be part of a match: the longest tail
// of the pending text that is a proper prefix of some stop string is held
// back until later pieces decide it. Cost per piece: O(piece + S * L) for S
// stop strings of length <= L (L is small: a few dozen bytes).
//
// Contract: concatenating every `emit` of Push() plus Flush() (when no stop
// hit) is a prefix of the input text that contains no stop string: it is cut
// right before the first stop string to complete (among those completed by
// the same piece, the one starting first), or it is the whole text. After a hit, further Push() calls emit
// nothing. Works on bytes; with UTF-8 input and UTF-8 stop strings the cuts
// fall on character boundaries.
// Thread safety: none (one per choice).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace moe::gateway {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  struct Result {
    std::string emit;
    bool stopped = false;
    std::string matched;  // the stop string that ended it (include_stop_str_in_output)
  };
  Result Push(std::string_view piece);
  // End of stream without a hit: releases the held-back tail.
  std::string Flush();

  bool stopped() const { return stopped_; }
  size_t held_bytes() const { return held_.size(); }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace moe::gateway
