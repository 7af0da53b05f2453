// The one worker loop every strategy runs under (DESIGN.md, "The one loop"). Nothing in it
// knows which strategy is active:
//
//   model.params() = resume->params          // resuming: the checkpoint's parameters
//   model.buffers() = resume->buffers        //   and running statistics (if the model has any)
//   strategy.attach_buffers(model.buffers())
//   strategy.init(model.params())             // and then the optimizer's state
//   for step in [first_step, steps):
//     for each of k micro-batches:      // k = accumulation_steps; no communication between
//       loss = model.forward_backward(sampler's batch, scale 1/k, accumulate after the first)
//                                       // the last one reports ranges to strategy.gradient_ready
//                                       // (a model on a layer storage reports every layer of
//                                       // every micro-batch to the storage instead)
//     strategy.synchronize(model.grads(), model.params())
//     record the step (metrics.csv row, trace spans, progress line on rank 0)
//     rank 0 evaluates on the test set every `eval_every` steps and after the last step
//     (every rank runs the evaluation where the model's parameters live in a layer storage,
//     zero stage 3: its gathers are collective; rank 0 keeps the result)
//     the checkpointer (rank 0 of single / dp / allreduce, every zero rank; worker 0 of ps its
//     running statistics) writes one when it is due
//
// Lives in worker/, above strategies/ and model/: it is where the model, data and sampler meet
// the strategies, and below experiments/, which only configures and starts it.
// Blocking: as long as the strategy's waits; a failure in any call propagates as an exception
// after strategy.abort() has been called, so peers in the same process are woken.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/progress.h"
#include "common/step_stats.h"
#include "common/stopwatch.h"
#include "model/dataset.h"
#include "model/model.h"
#include "model/sampler.h"
#include "strategies/sync_strategy.h"
#include "worker/checkpoints.h"
#include "worker/metrics_writer.h"
#include "worker/trace_writer.h"

namespace gradsync {

struct EvalPoint {
  std::int64_t step = 0;     // steps completed when evaluated
  double train_seconds = 0;  // training time so far, evaluation time excluded
  double test_loss = 0;
  double test_accuracy = 0;
};

struct LoopOptions {
  std::int64_t steps = 0;
  std::int64_t eval_every = 0;   // 0: never during training (still after the last step)
  std::int64_t trace_steps = 0;  // steps recorded in the trace
  int accumulation_steps = 1;    // micro-batches per step; sampler steps = steps * this
  Clock::time_point origin;      // the run's time zero, shared by every rank
  // Without gradsync's launcher (mpirun, srun, torchrun) no origin is shared: time zero is then
  // when strategy.init() returns, which no rank does before every rank has joined (allreduce's
  // broadcast; the ps shards' start gate, server/shard_state.h): one moment on every rank, to
  // within the time the initial parameters take to reach it.
  bool origin_at_init = false;
  bool keep_params = false;  // copy the final parameters into the result (tests)
  bool evaluate = true;      // false: no test-set evaluation (a synthetic model)
  // Resuming: the whole buffer's state from a checkpoint; the loop starts at resume->step.
  const TrainingState* resume = nullptr;
  // Asked after every step but the last, with the steps completed: true stops the run there,
  // after rank 0's checkpointer (if any) has saved that step (worker/stop_request.h). Every
  // rank must answer the same.
  std::function<bool(std::int64_t steps_done)> stop_after;
};

// Optional sinks; null pointers are skipped. `progress` is used by rank 0 only.
struct LoopSinks {
  MetricsWriter* metrics = nullptr;
  TraceWriter* trace = nullptr;
  ProgressReporter* progress = nullptr;
  const Checkpointer* checkpointer = nullptr;  // needs the strategy's optimizer()
};

struct LoopResult {
  std::int64_t steps = 0;    // steps this run took (a resumed run: from the checkpoint on)
  double train_seconds = 0;  // wall time of the steps, evaluation and checkpoints excluded
  double final_loss = 0;     // this rank's last training loss
  StepStats totals;          // summed over steps
  // Each step's wall time (compute, communication and waiting) in order: the distribution
  // behind the summary's percentiles, where stragglers show.
  std::vector<float> step_seconds;
  std::vector<EvalPoint> evals;  // rank 0 only
  // This rank's own work between steps (checkpoints; rank 0's evaluations), outside its step
  // times. Synchronous peers wait it out inside their next step: summarize() takes it back out.
  double between_steps_s = 0;
  std::int64_t parameters = 0;
  // The process's model-state ledger (common/model_state_memory.h) read as the loop ends: the
  // most bytes of parameters, gradients and optimizer state held at once since the process
  // began or the ledger's last reset_peaks() (train_in_process resets it as a run begins), so
  // the model and optimizer made before the loop count. A rank process's own figure; for
  // in-process runs (single, dp) the process's, which holds every dp replica. Per kind too:
  // each kind's own peak (the kinds need not peak together, so the total may be less than
  // their sum).
  std::uint64_t peak_model_state_bytes = 0;
  std::uint64_t peak_params_bytes = 0;
  std::uint64_t peak_grads_bytes = 0;
  std::uint64_t peak_optimizer_bytes = 0;
  std::vector<float> final_params;  // only with LoopOptions::keep_params
  // With keep_params, the model's buffers() then too (empty: it has none).
  std::vector<float> final_buffers;
  bool stopped = false;  // LoopOptions::stop_after ended it before the last step
  std::string backend;   // allreduce: the communicator's (Communicator::backend())
};

LoopResult run_worker_loop(Model& model, SyncStrategy& strategy, DistributedSampler& sampler,
                           const TrainTest& data, const LoopOptions& options,
                           const LoopSinks& sinks);

}  // namespace gradsync
