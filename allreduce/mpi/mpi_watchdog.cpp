#include "allreduce/mpi/mpi_watchdog.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace gradsync::mpi {

MpiWatchdog::MpiWatchdog(std::chrono::milliseconds heartbeat, std::function<void()> beat,
                         std::function<std::exception_ptr(Ending)> end)
    : heartbeat_(heartbeat),
      beat_(std::move(beat)),
      end_(std::move(end)),
      thread_([this] { loop(); }) {}

MpiWatchdog::~MpiWatchdog() {
  {
    std::lock_guard held(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void MpiWatchdog::watch(Clock::time_point began, Clock::time_point deadline) {
  bool sooner;
  {
    std::lock_guard held(mutex_);
    watching_ = true;
    ending_ = ended_ = false;
    error_ = nullptr;
    deadline_ = deadline;
    next_beat_ = began + heartbeat_;
    // Woken only when this collective needs it sooner than it wakes anyway: a wake-up per
    // collective would cost every collective a context switch, on cores the ranks share.
    sooner = closed_ || std::min(next_beat_, deadline_) < wake_at_;
  }
  if (sooner) changed_.notify_all();
}

std::exception_ptr MpiWatchdog::unwatch() {
  std::unique_lock held(mutex_);
  // end() is ending the job for this collective: returning now would let the caller take its
  // buffers back (or start the next collective) while the job is going down around them.
  changed_.wait(held, [&] { return !ending_ || ended_; });
  watching_ = false;
  ending_ = ended_ = false;
  return std::exchange(error_, nullptr);
}

void MpiWatchdog::close() {
  {
    std::lock_guard held(mutex_);
    closed_ = true;
  }
  changed_.notify_all();
}

void MpiWatchdog::loop() {
  std::unique_lock held(mutex_);
  while (!stopping_) {
    const auto now = Clock::now();
    if (ending_) {
      wake_at_ = Clock::time_point::max();  // until unwatch(), then the next watch()
      changed_.wait(held);
      continue;
    }
    if (!watching_) {
      // Look again a heartbeat from now. A collective watched meanwhile needs nothing before
      // its first heartbeat (unless its deadline is sooner, and then watch() wakes this
      // thread), so most collectives begin and end without waking it.
      wake_at_ = now + heartbeat_;
      changed_.wait_until(held, wake_at_);
      continue;
    }
    std::optional<Ending> ending;
    if (closed_) {
      ending = Ending::kClosing;
    } else if (now >= deadline_) {
      ending = Ending::kTimedOut;
    }
    if (ending) {
      // Claimed under the mutex: an unwatch() from now on waits for end() to return.
      ending_ = true;
      held.unlock();
      std::exception_ptr error;
      try {
        error = end_(*ending);
      } catch (...) {
        error = std::current_exception();
      }
      held.lock();
      error_ = error;
      ended_ = true;
      changed_.notify_all();
      continue;
    }
    if (now >= next_beat_) {
      next_beat_ = now + heartbeat_;
      // Unlocked: a Store round trip must not hold up watch() or unwatch(). A beat that comes
      // just after its collective ended publishes progress that is still true.
      held.unlock();
      try {
        beat_();
      } catch (...) {
        // Best effort, as every progress report: the timeout still names who is missing.
      }
      held.lock();
      continue;
    }
    wake_at_ = std::min(next_beat_, deadline_);
    changed_.wait_until(held, wake_at_);
  }
}

}  // namespace gradsync::mpi
