#include "common/replica_barrier.h"

#include "common/error.h"

namespace gradsync {

ReplicaBarrier::ReplicaBarrier(int parties, std::string what)
    : parties_(parties), what_(std::move(what)), arrivals_(static_cast<std::size_t>(parties), 0) {
  GRADSYNC_CHECK(parties >= 1, "a barrier needs at least one party");
}

void ReplicaBarrier::arrive_and_wait(int rank, std::chrono::milliseconds timeout) {
  GRADSYNC_CHECK(rank >= 0 && rank < parties_, "barrier rank out of range");
  std::unique_lock lock(mutex_);
  if (!abort_reason_.empty()) throw Error(what_ + " aborted: " + abort_reason_);
  const std::uint64_t my_phase = phase_;
  ++arrivals_[static_cast<std::size_t>(rank)];
  if (++arrived_ == parties_) {
    arrived_ = 0;
    ++phase_;
    changed_.notify_all();
    return;
  }
  changed_.wait_for(lock, timeout,
                    [&] { return phase_ != my_phase || !abort_reason_.empty(); });
  if (phase_ != my_phase) return;  // released, even if an abort came right after
  if (!abort_reason_.empty()) throw Error(what_ + " aborted: " + abort_reason_);
  // Timed out: the missing replicas are those that have not arrived at this phase.
  std::string missing;
  int first_missing = -1;
  for (int r = 0; r < parties_; ++r) {
    if (arrivals_[static_cast<std::size_t>(r)] <= my_phase) {
      missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      if (first_missing < 0) first_missing = r;
    }
  }
  // This replica leaves the phase counted as arrived; the barrier cannot be trusted again, so
  // it is aborted for everyone with the same reason.
  const std::string problem = "replica " + std::to_string(rank) + " waited " +
                              std::to_string(timeout.count()) + " ms for replica(s) " + missing;
  abort_reason_ = what_ + " timed out: " + problem;
  changed_.notify_all();
  throw TimeoutError(first_missing, "in-process", what_, problem);
}

void ReplicaBarrier::abort(const std::string& reason) {
  std::lock_guard lock(mutex_);
  if (abort_reason_.empty()) abort_reason_ = reason.empty() ? "aborted" : reason;
  changed_.notify_all();
}

}  // namespace gradsync
