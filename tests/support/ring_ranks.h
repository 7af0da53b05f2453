// Runs TcpRing tests: N ranks as N threads of this process, with a watchdog so a hang fails
// the test run instead of blocking it, and the closed-form data every rank starts from.
#pragma once

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "allreduce/communicator.h"
#include "allreduce/tcp/tcp_ring.h"

namespace gradsync::testing {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

inline gradsync::TcpRingOptions ring_options(std::chrono::milliseconds timeout = 10s) {
  gradsync::TcpRingOptions options;
  options.timeout = timeout;
  return options;
}

// Runs body(rank) on `size` threads and joins them. A thread still running after `limit` is a
// hang: say so and abort, rather than block the whole test run.
inline void run_ranks(int size, const std::function<void(int)>& body,
                      std::chrono::seconds limit = 30s) {
  std::mutex mutex;
  std::condition_variable changed;
  int done = 0;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[std::size_t(r)] = std::current_exception();
      }
      std::lock_guard lock(mutex);
      ++done;
      changed.notify_all();
    });
  }
  {
    std::unique_lock lock(mutex);
    if (!changed.wait_for(lock, limit, [&] { return done == size; })) {
      std::fprintf(stderr, "rank threads still running after %lld s: hang\n",
                   static_cast<long long>(limit.count()));
      std::abort();
    }
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r) {
    if (!errors[std::size_t(r)]) continue;
    try {
      std::rethrow_exception(errors[std::size_t(r)]);
    } catch (const std::exception& e) {
      FAIL_CHECK("rank " << r << " threw: " << std::string(e.what()));
    }
  }
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
