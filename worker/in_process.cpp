#include "worker/in_process.h"

#include <atomic>
#include <exception>
#include <latch>
#include <thread>

#include "common/model_state_memory.h"
#include "model/sampler.h"
#include "strategies/make_strategy.h"
#include "worker/model_factory.h"
#include "worker/run_plan.h"

namespace gradsync {

std::vector<LoopResult> train_in_process(const Config& config, const TrainTest& data,
                                         const LoopOptions& loop, const LoopSinks& rank0_sinks,
                                         const LoopSinks& other_sinks) {
  // A run begins: its peak model state is its own, not an earlier run's in this process (a
  // preset's runs, tests). Before the strategies, which may make their optimizers now.
  ModelStateMemory::instance().reset_peaks();
  const RunPlan plan = plan_run(config, data);
  std::vector<std::unique_ptr<SyncStrategy>> strategies =
      make_strategies(strategy_options(config, plan.steps));
  const std::vector<int>& widths = plan.widths;

  const std::size_t n = strategies.size();
  std::vector<LoopResult> results(n);
  std::vector<std::exception_ptr> errors(n);
  std::vector<int> failure_order(n, -1);
  std::atomic<int> failures{0};
  // Models are freed once every replica has left its loop and released its strategy: a
  // replica that gave up (timed out) may still have its buffers read and written by another
  // (dp's replica 0 sums every gradient and copies parameters out, on its own thread).
  std::latch released(static_cast<std::ptrdiff_t>(n));
  auto replica = [&](std::size_t r) {
    // Outside the try, so that it goes after the strategy: a step that failed may leave a
    // collective in flight over the model's buffers, and releasing the strategy ends it.
    std::unique_ptr<Model> model;
    try {
      // Built on the replica's own thread, so its buffers are first touched where they are used.
      model =
          make_model(config, widths, config.train.batch, model_device(config, static_cast<int>(r)));
      DistributedSampler sampler(data.train.size, static_cast<int>(r), config.workers,
                                 config.train.batch, config.train.seed);
      results[r] = run_worker_loop(*model, *strategies[r], sampler, data, loop,
                                   r == 0 ? rank0_sinks : other_sinks);
    } catch (...) {
      errors[r] = std::current_exception();
      failure_order[r] = failures++;
      strategies[r]->abort("replica " + std::to_string(r) + " failed");
    }
    // Each replica releases its strategy on its own thread, all of them at about the same time:
    // tearing down an NCCL communicator is collective (each rank's finalize waits for the
    // others'), so releasing them one after another from one thread would stall on the first.
    strategies[r].reset();
    released.arrive_and_wait();
    model.reset();
  };
  if (n == 1) {
    replica(0);
  } else {
    std::vector<std::jthread> threads;
    try {
      for (std::size_t r = 0; r < n; ++r) threads.emplace_back(replica, r);
    } catch (...) {
      // No thread for replica k (the process's thread limit): the running replicas would wait
      // for it at their barriers and at `released`. Abort its strategy and the rest, which
      // wakes them, and arrive for the replicas that never ran; the threads join on the way out.
      const std::size_t started = threads.size();
      for (std::size_t r = started; r < n; ++r) {
        strategies[r]->abort("replica " + std::to_string(r) + " could not start a thread");
      }
      released.count_down(static_cast<std::ptrdiff_t>(n - started));
      throw;
    }
  }
  // The first replica to fail holds the cause; the others only saw the abort it triggered.
  for (std::size_t r = 0; r < n; ++r) {
    if (failure_order[r] == 0) std::rethrow_exception(errors[r]);
  }
  return results;
}

}  // namespace gradsync
