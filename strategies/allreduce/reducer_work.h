// The Work shapes the bucket reducers share (strategies/allreduce/bucket_reducer.h): one that
// already ran, and one that runs a continuation when first waited for.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>

#include "allreduce/communicator.h"
#include "common/stopwatch.h"

namespace gradsync {

// A collective that already ran on the caller's thread.
class CompletedWork final : public Work {
 public:
  explicit CompletedWork(WorkTimes times) : times_(times) {}
  void wait(std::chrono::milliseconds) override {}
  bool completed() const override { return true; }
  WorkTimes times() const override { return times_; }

 private:
  WorkTimes times_;
};

// `inner`, then `then` on the thread that first waits for it (decoding, a compression's second
// round): done once; a failure of either is rethrown by every later wait. Times run from the
// inner collective's start to the end of `then`.
class ThenWork final : public Work {
 public:
  ThenWork(std::shared_ptr<Work> inner, std::function<void()> then)
      : inner_(std::move(inner)), then_(std::move(then)) {}
  void wait(std::chrono::milliseconds timeout) override;
  bool completed() const override { return done_; }
  WorkTimes times() const override;

 private:
  std::shared_ptr<Work> inner_;
  std::function<void()> then_;
  bool done_ = false;
  std::exception_ptr error_;
  Clock::time_point finished_{};
};

// Issues `body` as a blocking collective (its Work completed when it returns) or returns the
// async Work it gives: what every reducer does with its first round.
std::shared_ptr<Work> run_or_issue(bool blocking,
                                   const std::function<std::shared_ptr<Work>()>& issue,
                                   const std::function<void()>& run);

}  // namespace gradsync
