#include "strategies/allreduce/reducer_work.h"

#include <algorithm>

namespace gradsync {

void ThenWork::wait(std::chrono::milliseconds timeout) {
  if (!done_) {
    try {
      inner_->wait(timeout);
      then_();
    } catch (...) {
      error_ = std::current_exception();
    }
    done_ = true;
    finished_ = Clock::now();
  }
  if (error_) std::rethrow_exception(error_);
}

WorkTimes ThenWork::times() const {
  WorkTimes times = inner_->times();
  if (times.known() && done_) times.finished = std::max(times.finished, finished_);
  return times;
}

std::shared_ptr<Work> run_or_issue(bool blocking,
                                   const std::function<std::shared_ptr<Work>()>& issue,
                                   const std::function<void()>& run) {
  if (!blocking) return issue();
  const Clock::time_point started = Clock::now();
  run();
  return std::make_shared<CompletedWork>(WorkTimes{started, Clock::now()});
}

}  // namespace gradsync
