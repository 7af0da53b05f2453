// Stopping a run early, at one step on every rank and with a checkpoint there, when a scheduler
// asks: SIGTERM (scancel, the time limit, preemption) or SIGUSR1 (`sbatch --signal=USR1@60`).
// The signal reaches each rank at a different step, so the ranks agree through the job's store:
//
//   StopRequest stop(store, rank, world_size, timeout);   // catches the signals while it lives
//   loop.stop_after = [&](std::int64_t done) { return stop.stop_after(done); };
//
//   - the handler only records the signal;
//   - at its next step end a rank that has it posts "gradsync/stop/<rank>" = its steps done;
//   - from then on, at every step end, it checks whether every rank has posted; once all have,
//     the stop is after step (largest posted + 1), the same on every rank, and no rank is past
//     it: a rank cannot complete a step another rank has not started, so when the last rank
//     posts p no rank has completed more than p steps, and each sees that post by step p + 1.
// Every rank must receive the signal (Slurm signals every task of a step); until all have, the
// run goes on. It costs nothing before a signal, and one store round trip a step after one.
// One per process, on the training thread; the previous handlers come back when it is
// destroyed.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

#include "allreduce/store.h"

namespace gradsync {

class StopRequest {
 public:
  StopRequest(Store& store, int rank, int world_size, std::chrono::milliseconds timeout);
  ~StopRequest();
  StopRequest(const StopRequest&) = delete;
  StopRequest& operator=(const StopRequest&) = delete;

  // After each step, with the steps completed: true when the run stops here. Throws (the
  // store's errors) when the store does not answer within the timeout.
  bool stop_after(std::int64_t steps_done);
  // The signal that asked (SIGTERM or SIGUSR1); 0 while none has.
  int signal() const;

 private:
  Store& store_;
  int rank_;
  int world_size_;
  std::chrono::milliseconds timeout_;
  bool posted_ = false;
  std::optional<std::int64_t> stop_at_;
};

}  // namespace gradsync
