// Runs N ranks (or workers) as N threads of this process, with a watchdog: a thread still
// running after the limit is a hang, which aborts the test run instead of blocking it.
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gradsync::testing {

// Runs body(rank) on `size` threads and joins them. A thread still running after `limit` is a
// hang: say so and abort, rather than block the whole test run.
inline void run_ranks(int size, const std::function<void(int)>& body,
                      std::chrono::seconds limit = std::chrono::seconds(30)) {
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

}  // namespace gradsync::testing
