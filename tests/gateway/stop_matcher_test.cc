#include "services/gateway/stop_matcher.h"

#include <gtest/gtest.h>

#include <random>

namespace moe::gateway {
namespace {

std::string Feed(StopMatcher& m, const std::vector<std::string>& pieces, bool* stopped) {
  std::string out;
  *stopped = false;
  for (const auto& p : pieces) {
    auto r = m.Push(p);
    out += r.emit;
    if (r.stopped) {
      *stopped = true;
      return out;
    }
  }
  return out + m.Flush();
}

TEST(GatewayStopMatcher, MatchesAcrossTokenBoundariesWithoutLeaking) {
  StopMatcher m({"\n\nUser:"});
  bool stopped;
  std::string out;
  auto r1 = m.Push("Hello\n");
  EXPECT_EQ(r1.emit, "Hello");  // "\n" may start the stop string: held
  auto r2 = m.Push("\nUs");
  EXPECT_EQ(r2.emit, "");
  auto r3 = m.Push("er: more");
  EXPECT_TRUE(r3.stopped);
  EXPECT_EQ(r3.emit, "");
  EXPECT_EQ(m.Flush(), "");
  StopMatcher m2({"STOP"});
  EXPECT_EQ(Feed(m2, {"ab", "ST", "OP", "cd"}, &stopped), "ab");
  EXPECT_TRUE(stopped);
}

TEST(GatewayStopMatcher, ReleasesAFalsePrefix) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.Push("xST").emit, "x");
  EXPECT_EQ(m.Push("ART").emit, "START");
  EXPECT_EQ(m.held_bytes(), 0u);
  StopMatcher m2({"abc"});
  bool stopped;
  EXPECT_EQ(Feed(m2, {"a", "b"}, &stopped), "ab");  // flushed at the end
  EXPECT_FALSE(stopped);
}

TEST(GatewayStopMatcher, EarliestOfSeveralStops) {
  StopMatcher m({"world", "lo w"});
  bool stopped;
  EXPECT_EQ(Feed(m, {"hello world"}, &stopped), "hel");
  EXPECT_TRUE(stopped);
  StopMatcher m2({"b", "abc"});
  EXPECT_EQ(Feed(m2, {"xa", "bc"}, &stopped), "x");  // "abc" starts first
}

TEST(GatewayStopMatcher, NoStopsPassesThrough) {
  StopMatcher m({});
  EXPECT_EQ(m.Push("abc").emit, "abc");
  EXPECT_EQ(m.held_bytes(), 0u);
}

TEST(GatewayStopMatcher, AfterStopEmitsNothing) {
  StopMatcher m({"x"});
  EXPECT_TRUE(m.Push("axb").stopped);
  auto r = m.Push("more");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "");
}

// Property over random texts, stop sets and split points: the output is a
// prefix of the text that contains no stop string; when the matcher reports
// a stop, the text continues with a stop string right there; otherwise the
// whole text came out and it holds no stop string.
TEST(GatewayStopMatcher, RandomSplitsNeverLeak) {
  std::mt19937 rng(7);
  int stops_seen = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text;
    int len = rng() % 40;
    for (int i = 0; i < len; ++i) text += "abc\n"[rng() % 4];
    std::vector<std::string> stops;
    int ns = 1 + rng() % 3;
    for (int s = 0; s < ns; ++s) {
      std::string st;
      int sl = 1 + rng() % 4;
      for (int i = 0; i < sl; ++i) st += "abc\n"[rng() % 4];
      stops.push_back(st);
    }
    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size();) {
      size_t n = 1 + rng() % 4;
      pieces.push_back(text.substr(i, n));
      i += n;
    }
    StopMatcher m(stops);
    bool stopped;
    std::string got = Feed(m, pieces, &stopped);
    ASSERT_EQ(text.compare(0, got.size(), got), 0) << "text=" << text;
    for (const auto& s : stops) ASSERT_EQ(got.find(s), std::string::npos) << "leaked " << s << " in " << got;
    if (stopped) {
      ++stops_seen;
      bool at_stop = false;
      for (const auto& s : stops) at_stop |= text.compare(got.size(), s.size(), s) == 0;
      ASSERT_TRUE(at_stop) << "text=" << text << " got=" << got;
    } else {
      ASSERT_EQ(got, text);
    }
    // One token per character: the cut is before the first stop to complete.
    StopMatcher m1(stops);
    std::vector<std::string> chars;
    for (char c : text) chars.emplace_back(1, c);
    std::string got1 = Feed(m1, chars, &stopped);
    size_t first_end = std::string::npos, cut = std::string::npos;
    for (const auto& s : stops) {
      size_t p = text.find(s);
      if (p != std::string::npos && (p + s.size() < first_end || (p + s.size() == first_end && p < cut))) {
        first_end = p + s.size();
        cut = p;
      }
    }
    ASSERT_EQ(got1, cut == std::string::npos ? text : text.substr(0, cut)) << "text=" << text;
  }
  EXPECT_GT(stops_seen, 500);
}

}  // namespace
}  // namespace moe::gateway
