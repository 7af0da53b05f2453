#include "allreduce/tcp/work_queue.h"

#include "common/error.h"

namespace gradsync::tcp {
namespace {

// How close to a Work::wait deadline the collective's own deadline must fall for wait() to let
// the collective fail by itself: the blocking forms wait exactly the communicator's timeout,
// measured from the call, and the collective starts a moment after the call.
constexpr auto kOwnDeadlineSlack = std::chrono::milliseconds(250);

}  // namespace

RingWork::RingWork(std::uint64_t seq, std::string what, int rank,
                   std::chrono::milliseconds comm_timeout, std::chrono::milliseconds report_grace)
    : seq_(seq),
      what_(std::move(what)),
      rank_(rank),
      comm_timeout_(comm_timeout),
      report_grace_(report_grace) {}

void RingWork::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  const auto deadline = Clock::now() + timeout;
  const auto done = [&] { return state_ == State::kDone; };
  if (!done_.wait_until(lock, deadline, done)) {
    // Prefer the collective's own error (it names the rank waited for and every rank's
    // progress) when it is due about now; it arrives within its deadline plus the report grace.
    // A wait as long as the communicator's timeout (the strategies') wants the collective's own
    // verdict even when it started late, queued behind another: its deadline then falls after
    // the wait's, and the earlier collective's failure, which fails this one, is due first.
    const bool whole_timeout = timeout >= comm_timeout_;
    const bool own_error_due =
        state_ == State::kFailing ||
        (state_ == State::kRunning &&
         (whole_timeout || started_ + comm_timeout_ <= deadline + kOwnDeadlineSlack)) ||
        (state_ == State::kQueued && whole_timeout);
    // The slack: for the failing rank's own last steps (closing, publishing); a quarter of the
    // timeout at most, so that short timeouts stay short.
    const auto slack = std::min<Clock::duration>(std::chrono::seconds(1), comm_timeout_ / 4);
    const auto own_error_by =
        std::max(started_ + comm_timeout_, Clock::now()) + report_grace_ + slack;
    if (!own_error_due || !done_.wait_until(lock, own_error_by, done)) {
      if (provisional_) std::rethrow_exception(provisional_);
      throw TimeoutError(rank_, "this process", what_,
                         "wait gave up after " + std::to_string(timeout.count()) +
                             " ms; the collective is still " +
                             (state_ == State::kQueued ? "queued behind earlier ones" : "running"));
    }
  }
  if (error_) std::rethrow_exception(error_);
}

bool RingWork::completed() const {
  std::lock_guard lock(mutex_);
  return state_ == State::kDone;
}

WorkTimes RingWork::times() const {
  std::lock_guard lock(mutex_);
  if (state_ != State::kDone) return {};
  return WorkTimes{started_, finished_};
}

void RingWork::mark_started() {
  std::lock_guard lock(mutex_);
  state_ = State::kRunning;
  started_ = Clock::now();
}

void RingWork::mark_failing(std::exception_ptr provisional) {
  std::lock_guard lock(mutex_);
  state_ = State::kFailing;
  provisional_ = std::move(provisional);
}

void RingWork::finish(std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    state_ = State::kDone;
    finished_ = Clock::now();
    error_ = std::move(error);
  }
  done_.notify_all();
}

WorkQueue::WorkQueue(int rank, std::chrono::milliseconds comm_timeout,
                     std::chrono::milliseconds report_grace)
    : rank_(rank),
      comm_timeout_(comm_timeout),
      report_grace_(report_grace),
      thread_([this] { run(); }) {}

std::shared_ptr<Work> WorkQueue::submit(const std::string& description, Task task,
                                        bool here_if_idle) {
  std::unique_lock lock(mutex_);
  const std::uint64_t seq = ++issued_;
  auto work =
      std::make_shared<RingWork>(seq, "collective #" + std::to_string(seq) + " " + description,
                                 rank_, comm_timeout_, report_grace_);
  if (failure_) {
    work->finish(failure_);
  } else if (stopping_) {
    work->finish(std::make_exception_ptr(Error("rank " + std::to_string(rank_) + ": " +
                                               work->what() + " issued to a closed communicator")));
  } else if (here_if_idle && queue_.empty() && !running_) {
    // Nothing ahead of it: run it here, as the thread would. running_ keeps the thread from
    // starting anything submitted meanwhile until this one has finished.
    running_ = true;
    lock.unlock();
    // The thread is woken only for what was queued meanwhile: waking it for nothing costs every
    // collective a futex wake and a context switch, on the cores the ranks share.
    if (execute(*work, task)) changed_.notify_one();
  } else {
    queue_.emplace_back(work, std::move(task));
    lock.unlock();
    changed_.notify_one();
  }
  return work;
}

bool WorkQueue::execute(RingWork& work, Task& task) {
  work.mark_started();
  std::exception_ptr error;
  try {
    task(work);
  } catch (...) {
    error = std::current_exception();
  }
  std::lock_guard lock(mutex_);
  running_ = false;
  if (error) failure_ = error;
  // Complete after recording the failure: a caller that sees this Work fail and issues again
  // must get the same error, not a fresh attempt.
  work.finish(error);
  return !queue_.empty();
}

void WorkQueue::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  changed_.notify_one();
  if (thread_.joinable()) thread_.join();
}

bool WorkQueue::settled() {
  std::lock_guard lock(mutex_);
  return queue_.empty() && !running_ && !failure_;
}

void WorkQueue::run() {
  std::unique_lock lock(mutex_);
  while (true) {
    // Not while a caller runs a task of its own (submit's here_if_idle): tasks run one at a time.
    changed_.wait(lock, [&] { return stopping_ || (!queue_.empty() && !running_); });
    if (queue_.empty()) return;  // stopping, nothing left
    auto [work, task] = std::move(queue_.front());
    queue_.pop_front();
    if (failure_) {
      work->finish(failure_);
      continue;
    }
    if (stopping_) {
      work->finish(
          std::make_exception_ptr(Error("rank " + std::to_string(rank_) + ": " + work->what() +
                                        " never ran: the communicator was destroyed")));
      continue;
    }
    running_ = true;
    lock.unlock();
    execute(*work, task);
    lock.lock();
  }
}

}  // namespace gradsync::tcp
