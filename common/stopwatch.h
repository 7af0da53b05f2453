// Monotonic wall-clock timing for step phases and the trace.
#pragma once

#include <chrono>

namespace gradsync {

using Clock = std::chrono::steady_clock;

inline double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

class Stopwatch {
 public:
  Stopwatch() : start_(Clock::now()) {}
  void restart() { start_ = Clock::now(); }
  double seconds() const { return seconds_between(start_, Clock::now()); }
  Clock::time_point start() const { return start_; }

 private:
  Clock::time_point start_;
};

}  // namespace gradsync
