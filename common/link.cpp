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

// Checked before the members derived from it are computed.
double checked_rate(double bytes_per_s) {
  GRADSYNC_CHECK(bytes_per_s >= 0 && std::isfinite(bytes_per_s),
                 "a link rate must be finite and not negative");
  return bytes_per_s;
}

}  // namespace

Pacer::Pacer(double bytes_per_s)
    : rate_(checked_rate(bytes_per_s)),
      burst_(bytes_per_s > 0 ? burst_for(bytes_per_s) : 0),
      burst_time_(duration_of(burst_)) {}

Pacer::Clock::duration Pacer::duration_of(double bytes) const {
  if (rate_ == 0) return Clock::duration::zero();
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(bytes / rate_));
}

Pacer::Clock::time_point Pacer::reserve(std::size_t bytes, Clock::time_point now,
                                        Clock::duration slack) {
  // A link idle for longer than the slack has not banked the rest: it bursts at most that much.
  busy_until_ = std::max(busy_until_, now - slack) + duration_of(static_cast<double>(bytes));
  return busy_until_;
}

double Pacer::credit(Clock::time_point now) const {
  return std::min(burst_, std::chrono::duration<double>(now - busy_until_).count() * rate_);
}

std::size_t Pacer::take(std::size_t wanted) {
  if (rate_ == 0) return wanted;
  std::lock_guard lock(mutex_);
  const auto now = Clock::now();
  const double available = credit(now);
  // Crumbs are not worth a system call: wait until a quarter burst (or all that is wanted).
  if (available < std::min(static_cast<double>(wanted), burst_ / 4)) return 0;
  const auto granted = std::min(wanted, static_cast<std::size_t>(available));
  reserve(granted, now, burst_time_);
  return granted;
}

void Pacer::refund(std::size_t unused) {
  if (rate_ == 0 || unused == 0) return;
  std::lock_guard lock(mutex_);
  // Beyond the burst it is lost again: credit() caps what the earlier moment leaves.
  busy_until_ -= duration_of(static_cast<double>(unused));
}

std::chrono::nanoseconds Pacer::wait_for(std::size_t bytes) {
  if (rate_ == 0) return std::chrono::nanoseconds(0);
  std::lock_guard lock(mutex_);
  // A quarter of the burst is worth waking for; the rest accrues while the caller wakes up.
  const double needed = std::min(static_cast<double>(bytes), burst_ / 4) - credit(Clock::now());
  if (needed <= 0) return std::chrono::nanoseconds(0);
  return std::chrono::nanoseconds(static_cast<long long>(std::ceil(needed / rate_ * 1e9)));
}

void Pacer::acquire(std::size_t bytes) {
  if (rate_ == 0 || bytes == 0) return;
  Clock::time_point through;
  {
    std::lock_guard lock(mutex_);
    through = reserve(bytes, Clock::now(), burst_time_);
  }
  // The bytes are the caller's to move once the link has carried them: sleep off the debt.
  std::this_thread::sleep_until(through);
}

Pacer::Clock::time_point Pacer::schedule(std::size_t bytes, Clock::time_point now) {
  if (rate_ == 0) return now;
  std::lock_guard lock(mutex_);
  return reserve(bytes, now, Clock::duration::zero());
}

Pacer::Clock::time_point Pacer::schedule_arrived(std::size_t bytes, Clock::time_point now) {
  if (rate_ == 0) return now;
  std::lock_guard lock(mutex_);
  // Cut-through: an idle link finished receiving the message as its last byte arrived; a busy
  // one starts on it only when done with the earlier ones.
  return reserve(bytes, now, duration_of(static_cast<double>(bytes)));
}

std::shared_ptr<Link> make_link(double gbps) {
  GRADSYNC_CHECK(gbps >= 0 && std::isfinite(gbps), "network.link_gbps must be >= 0");
  if (gbps == 0) return nullptr;
  return std::make_shared<Link>(gbps);
}

}  // namespace gradsync
