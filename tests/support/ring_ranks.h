// Runs TcpRing tests: N ranks as N threads of this process (run_ranks.h: with a watchdog, so a
// hang fails the test run instead of blocking it), and the closed-form data every rank starts
// from.
#pragma once

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "allreduce/communicator.h"
#include "allreduce/tcp/tcp_ring.h"
#include "tests/support/run_ranks.h"

namespace gradsync::testing {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

inline gradsync::TcpRingOptions ring_options(std::chrono::milliseconds timeout = 10s) {
  gradsync::TcpRingOptions options;
  options.timeout = timeout;
  return options;
}

inline std::vector<float> rank_data(int rank, std::size_t length) {
  std::vector<float> data(length);
  for (std::size_t i = 0; i < length; ++i) data[i] = float(rank + 1 + int(i % 7));
  return data;
}

// Sum over n ranks of rank_data: n(n+1)/2 + n (i % 7).
inline float expected_sum(int n, std::size_t i) { return float(n * (n + 1) / 2 + n * int(i % 7)); }

// Counts the elements that differ from expected(i); reports the first one.
template <typename Expected>
std::size_t wrong_elements(const std::vector<float>& got, Expected expected) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != expected(i)) {
      if (wrong == 0) MESSAGE("element " << i << ": " << got[i] << " != " << expected(i));
      ++wrong;
    }
  }
  return wrong;
}

// A flag the rank threads of a failure test wait on (bounded), e.g. "the others have failed".
class Latch {
 public:
  explicit Latch(int count) : count_(count) {}
  void count_down() {
    std::lock_guard lock(mutex_);
    if (--count_ <= 0) changed_.notify_all();
  }
  bool wait(std::chrono::milliseconds limit) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, limit, [&] { return count_ <= 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int count_;
};

inline long long ms_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

}  // namespace gradsync::testing
