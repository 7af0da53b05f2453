// MpiWatchdog: the deadline and the heartbeat of a collective whose thread is blocked inside MPI
// (MpiRunner's blocking path under MPI_THREAD_MULTIPLE, mpi_runner.h). A blocking MPI call cannot
// watch the clock, so one watchdog thread per runner does it in its place:
//
//   MpiWatchdog watchdog(heartbeat, publish_progress, end_the_job);   // starts its thread
//   watchdog.watch(began, deadline);           // the caller's thread is about to block in MPI
//   MPI_Allreduce(...);                        // beat() every heartbeat past the first
//   if (auto error = watchdog.unwatch()) std::rethrow_exception(error);
//
// While a collective is watched, beat() runs once it has lasted a heartbeat, then once every
// heartbeat. If the deadline passes, or close() comes, while it is still watched, end() runs
// once (it ends the job: MPI can neither time a blocking call out nor cancel it, and may write
// into its buffers until it returns) and its error is what unwatch() returns; an unwatch() that
// comes while end() runs waits for it, so the blocked thread never goes on as if its collective
// had finished in time. The hooks run on the watchdog's thread, never under its mutex, so
// watch(), unwatch() and close() never wait for a Store round trip, except unwatch() for an end()
// under way. Internal to allreduce/mpi/.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "allreduce/tcp/socket.h"

namespace gradsync::mpi {

class MpiWatchdog {
 public:
  enum class Ending { kTimedOut, kClosing };
  using Clock = tcp::Clock;

  // `beat` publishes the collective's progress; `end` ends the job for the watched collective
  // and returns the error its thread throws (if the job goes on after all: MPI_Abort returned).
  // Both must return in bounded time. The thread starts here.
  MpiWatchdog(std::chrono::milliseconds heartbeat, std::function<void()> beat,
              std::function<std::exception_ptr(Ending)> end);
  // Stops the thread and joins it: at once, or when a hook under way returns.
  ~MpiWatchdog();
  MpiWatchdog(const MpiWatchdog&) = delete;
  MpiWatchdog& operator=(const MpiWatchdog&) = delete;

  // The collective that began at `began` must be done by `deadline`: watched until unwatch().
  void watch(Clock::time_point began, Clock::time_point deadline);
  // The watch ends; null, or end()'s error if the watchdog began to end the job first (then
  // after end() returned).
  std::exception_ptr unwatch();
  // From now on a watched collective ends the job (Ending::kClosing), one watched already at once.
  void close();

 private:
  void loop();

  const std::chrono::milliseconds heartbeat_;
  const std::function<void()> beat_;
  const std::function<std::exception_ptr(Ending)> end_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool watching_ = false;
  bool ending_ = false;  // end() was called for the collective watched now
  bool ended_ = false;   // and returned `error_`
  bool closed_ = false;
  bool stopping_ = false;
  Clock::time_point deadline_, next_beat_;
  Clock::time_point wake_at_ = Clock::time_point::max();  // when the thread next looks, unasked
  std::exception_ptr error_;
  std::thread thread_;  // last: starts after every member above exists
};

}  // namespace gradsync::mpi
