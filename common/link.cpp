#include "common/link.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "common/error.h"

namespace gradsync {
namespace {

// Large enough that a socket write or read is not cut into crumbs and that credit keeps
// accruing while a woken thread gets back to the CPU (poll's millisecond granularity and the
// scheduler's latency); small enough that the rate holds over a few milliseconds.
double burst_for(double rate) { return std::max(256.0 * 1024, rate * 4e-3); }

}  // namespace

TokenBucket::TokenBucket(double bytes_per_s)
    : rate_(bytes_per_s),
      burst_(bytes_per_s > 0 ? burst_for(bytes_per_s) : 0),
      credit_(burst_),
      last_(Clock::now()) {
  GRADSYNC_CHECK(bytes_per_s >= 0 && std::isfinite(bytes_per_s),
                 "a link rate must be finite and not negative");
}

void TokenBucket::refill(Clock::time_point now) {
  const double elapsed = std::chrono::duration<double>(now - last_).count();
  credit_ = std::min(burst_, credit_ + elapsed * rate_);
  last_ = now;
}

std::size_t TokenBucket::take(std::size_t wanted) {
  if (rate_ == 0) return wanted;
  std::lock_guard lock(mutex_);
  refill(Clock::now());
  // Crumbs are not worth a system call: wait until a quarter burst (or all that is wanted).
  if (credit_ < std::min(static_cast<double>(wanted), burst_ / 4)) return 0;
  const auto granted = std::min(wanted, static_cast<std::size_t>(credit_));
  credit_ -= static_cast<double>(granted);
  return granted;
}

void TokenBucket::refund(std::size_t unused) {
  if (rate_ == 0 || unused == 0) return;
  std::lock_guard lock(mutex_);
  credit_ = std::min(burst_, credit_ + static_cast<double>(unused));
}

std::chrono::nanoseconds TokenBucket::wait_for(std::size_t bytes) {
  if (rate_ == 0) return std::chrono::nanoseconds(0);
  std::lock_guard lock(mutex_);
  refill(Clock::now());
  // A quarter of the burst is worth waking for; the rest accrues while the caller wakes up.
  const double needed = std::min(static_cast<double>(bytes), burst_ / 4) - credit_;
  if (needed <= 0) return std::chrono::nanoseconds(0);
  return std::chrono::nanoseconds(static_cast<long long>(std::ceil(needed / rate_ * 1e9)));
}

void TokenBucket::acquire(std::size_t bytes) {
  if (rate_ == 0 || bytes == 0) return;
  double debt_s = 0;
  {
    std::lock_guard lock(mutex_);
    refill(Clock::now());
    credit_ -= static_cast<double>(bytes);
    if (credit_ < 0) debt_s = -credit_ / rate_;
    throttled_s_ += debt_s;
  }
  if (debt_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(debt_s));
}

double TokenBucket::throttled_seconds() const {
  std::lock_guard lock(mutex_);
  return throttled_s_;
}

TokenBucket::Clock::time_point TokenBucket::schedule(std::size_t bytes, Clock::time_point now) {
  if (rate_ == 0) return now;
  std::lock_guard lock(mutex_);
  const auto busy = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(static_cast<double>(bytes) / rate_));
  free_at_ = std::max(now, free_at_) + busy;
  return free_at_;
}

TokenBucket::Clock::time_point TokenBucket::schedule_arrived(std::size_t bytes,
                                                             Clock::time_point now) {
  if (rate_ == 0) return now;
  std::lock_guard lock(mutex_);
  const auto busy = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(static_cast<double>(bytes) / rate_));
  // Cut-through: an idle link finished receiving the message as its last byte arrived; a busy
  // one starts on it only when done with the earlier ones.
  free_at_ = std::max(now, free_at_ + busy);
  return free_at_;
}

std::shared_ptr<EmulatedLink> make_emulated_link(double gbps) {
  GRADSYNC_CHECK(gbps >= 0 && std::isfinite(gbps), "network.link_gbps must be >= 0");
  if (gbps == 0) return nullptr;
  return std::make_shared<EmulatedLink>(gbps);
}

}  // namespace gradsync
