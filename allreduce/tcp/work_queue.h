// The background thread of a communicator: collectives run one at a time, in the order they were
// issued, and each caller holds a Work handle (a RingWork) that completes with success or an
// exception.
//
//   WorkQueue queue(rank, timeout);
//   auto work = queue.submit("allreduce of 10 floats", [&](RingWork& w) { ... });  // returns
//   work->wait(timeout);                                                           // rethrows
//
// Failure policy: the first task that throws poisons the queue; every task still queued and
// every later submit completes at once with that same exception (same type, same message), so
// a communicator that failed keeps saying why. submit() is thread-safe; the tasks run on the
// queue's own thread. stop() (also run by the destructor) fails what is still queued with
// "communicator destroyed" and joins the thread; the running task must be made to return by
// its owner (TcpRing shuts its sockets down first).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "allreduce/communicator.h"
#include "allreduce/tcp/socket.h"

namespace gradsync::tcp {

class RingWork final : public Work {
 public:
  // `what` is "collective #<seq> <description>", for messages.
  RingWork(std::uint64_t seq, std::string what, int rank, std::chrono::milliseconds comm_timeout,
           std::chrono::milliseconds report_grace);

  // Blocks until the collective completes and rethrows its error. If `timeout` passes first, the
  // collective is still running and its own deadline (start + the communicator's timeout) falls
  // within it, the wait goes on until the collective's own failure, whose message says who was
  // waited for, and at most that deadline plus the report grace. Otherwise it throws a
  // TimeoutError saying the collective is still queued or running.
  void wait(std::chrono::milliseconds timeout) override;
  bool completed() const override;
  WorkTimes times() const override;

  std::uint64_t seq() const { return seq_; }
  const std::string& what() const { return what_; }

  // Called on the queue's thread only.
  void mark_started();
  // The collective timed out and is collecting the ranks' reports. `provisional`, when given,
  // is its error as far as it is known now (the rank it waited for): a wait() that gives up
  // before the reports are in (the Store's host stopped) throws it rather than "gave up".
  void mark_failing(std::exception_ptr provisional = nullptr);
  void finish(std::exception_ptr error);

 private:
  enum class State { kQueued, kRunning, kFailing, kDone };

  const std::uint64_t seq_;
  const std::string what_;
  const int rank_;
  const std::chrono::milliseconds comm_timeout_;
  const std::chrono::milliseconds report_grace_;
  mutable std::mutex mutex_;
  std::condition_variable done_;
  State state_ = State::kQueued;
  Clock::time_point started_;
  Clock::time_point finished_{};
  std::exception_ptr error_;
  std::exception_ptr provisional_;
};

class WorkQueue {
 public:
  using Task = std::function<void(RingWork&)>;

  WorkQueue(int rank, std::chrono::milliseconds comm_timeout,
            std::chrono::milliseconds report_grace);
  ~WorkQueue() { stop(); }
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Assigns the next sequence number (1, 2, ...; every rank numbers its calls alike) and queues
  // the task. `description` reads like "allreduce of 1000 floats". With `here_if_idle` (a caller
  // that waits for the result at once) and nothing queued or running, the task runs on the
  // caller's thread instead, in its turn all the same, and the Work returned has completed.
  std::shared_ptr<Work> submit(const std::string& description, Task task,
                               bool here_if_idle = false);
  void stop();

  // Every task issued has completed, and none failed: the communicator may end in order.
  bool settled();

 private:
  void run();
  // Runs the task, then records its failure and completes the Work; running_ was set by the
  // caller, and is cleared here. Returns whether tasks wait in the queue behind it.
  bool execute(RingWork& work, Task& task);

  const int rank_;
  const std::chrono::milliseconds comm_timeout_;
  const std::chrono::milliseconds report_grace_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::pair<std::shared_ptr<RingWork>, Task>> queue_;
  std::uint64_t issued_ = 0;
  bool stopping_ = false;
  bool running_ = false;  // a task is running, on the thread or on a caller's
  std::exception_ptr failure_;
  std::thread thread_;  // last: starts after every member above exists
};

}  // namespace gradsync::tcp
