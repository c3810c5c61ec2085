// Test helpers shared by the inferd tests that drive a Batcher directly: a greedy request, a
// per-test directory name, and a collector of one sequence's streamed tokens that waits for its end.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "services/inferd/batcher.h"

namespace moe::inferd::testing {

// A greedy request of n tokens.
inline SeqRequest Greedy(const std::string& id, std::vector<int32_t> prompt, int n) {
  SeqRequest r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.max_tokens = n;
  r.sampling.temperature = 0;
  return r;
}

// MOE_BINARY_DIR/tests/inferd/<stem>_<current test>: ctest runs each test as its own process, in
// parallel, and two must not write one checkpoint directory at once.
inline std::string PerTestDir(const std::string& stem) {
  return std::string(MOE_BINARY_DIR) + "/tests/inferd/" + stem + "_" +
         ::testing::UnitTest::GetInstance()->current_test_info()->name();
}

struct SeqCollector {
  explicit SeqCollector(std::chrono::seconds timeout = std::chrono::seconds(30)) : timeout(timeout) {}
  std::chrono::seconds timeout;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> tokens;
  bool done = false;
  SeqOutput fin;
  SeqCallback Cb() {
    return [this](SeqOutput o) {
      std::lock_guard<std::mutex> l(mu);
      for (auto& t : o.tokens) tokens.push_back(t.token);
      if (o.finished) {
        done = true;
        fin = o;
      }
      cv.notify_all();
    };
  }
  void Wait() {
    std::unique_lock<std::mutex> l(mu);
    ASSERT_TRUE(cv.wait_for(l, timeout, [&] { return done; }));
  }
  // The tokens below 256 as bytes (the toy models' byte vocabulary).
  std::string Text() {
    std::string s;
    for (int32_t t : tokens) {
      if (t < 256) s += static_cast<char>(t);
    }
    return s;
  }
};

}  // namespace moe::inferd::testing
