#include "worker/worker_loop.h"

#include <algorithm>

#include "common/error.h"
#include "common/failure_note.h"
#include "common/model_state_memory.h"

namespace gradsync {
namespace {

void add(StepStats& total, const StepStats& step) {
  total.compute_s += step.compute_s;
  total.communicate_s += step.communicate_s;
  total.wait_s += step.wait_s;
  total.bytes_sent += step.bytes_sent;
  total.bytes_received += step.bytes_received;
  total.collectives += step.collectives;
}

// The compute track holds what the training thread did (forward and backward, then
// synchronize(): waiting for the reductions still running, and the update); the communication
// track the strategy's collectives or messages as they really ran, beside backward where
// they overlapped it.
void trace_step(TraceWriter& trace, int rank, std::int64_t step, Clock::time_point begin,
                Clock::time_point computed, Clock::time_point end, const SyncStrategy& strategy) {
  trace.add_span(rank, "compute", step, begin, computed);
  trace.add_span(rank, "synchronize", step, computed, end);
  for (TraceSpan span : strategy.last_step_spans()) {
    span.step = step;
    trace.add_span(rank, TraceTrack::kCommunication, span);
  }
}

// Resuming: the checkpoint's parameters go in before strategy.init(), which spreads rank 0's to
// every replica, and the optimizer's state after it, once the strategy has made its optimizer.
// No parameters in the state: the strategy brings them (a ps worker pulls from its shards).
// The running statistics go in alike, on every rank (the checkpoint holds rank 0's).
std::int64_t resume_params(Model& model, const TrainingState* resume) {
  if (resume == nullptr) return 0;
  if (!resume->params.empty()) model.copy_params_from_host(resume->params);
  check_resumed_buffers(*resume, model);
  const std::span<float> buffers = model.buffers();
  if (!buffers.empty()) std::copy(resume->buffers.begin(), resume->buffers.end(), buffers.begin());
  return static_cast<std::int64_t>(resume->step);
}

void resume_optimizer(SyncStrategy& strategy, const TrainingState* resume) {
  if (resume == nullptr || resume->momentum.empty()) return;
  if (Optimizer* optimizer = strategy.optimizer()) {
    optimizer->load_state(resume->momentum, resume->optimizer_steps);
  }
}

void checkpoint(const Checkpointer& checkpointer, std::int64_t step, Model& model,
                SyncStrategy& strategy, TraceWriter* trace, bool traced) {
  const Clock::time_point begin = Clock::now();
  const bool buffers = strategy.rank() == 0 && !model.buffers().empty();
  // Rank 0's running statistics before any part: a step folder whose parts are all there holds
  // them too.
  if (buffers) checkpointer.save_buffers(step + 1, model.buffers());
  if (!checkpointer.writes_parts()) {
    // ps: the shards write the parts. Worker 0 of a model without buffers wrote nothing.
    if (buffers && trace && traced) {
      trace->add_span(strategy.rank(), "checkpoint", step, begin, Clock::now());
    }
    return;
  }
  if (auto own = strategy.own_checkpoint_parts(model.params())) {
    checkpointer.save_parts(step + 1, own->parts, std::move(own->mine), strategy.rank() == 0);
  } else {
    const Optimizer* optimizer = strategy.optimizer();
    GRADSYNC_CHECK(optimizer != nullptr, "a checkpointing rank must run the optimizer");
    checkpointer.save(step + 1, model, *optimizer);
  }
  if (trace && traced) {
    trace->add_span(strategy.rank(), "checkpoint", step, begin, Clock::now());
  }
}

}  // namespace

LoopResult run_worker_loop(Model& model, SyncStrategy& strategy, DistributedSampler& sampler,
                           const TrainTest& data, const LoopOptions& options,
                           const LoopSinks& sinks) {
  const int rank = strategy.rank();
  const int micro_steps = options.accumulation_steps;
  const float micro_scale = 1.0f / static_cast<float>(micro_steps);
  // An optimizer step takes k batches; an epoch holds the whole steps that fit in it, and its
  // leftover batches (fewer than k) are dropped, as the sampler drops a partial batch.
  const std::int64_t batches_per_epoch = sampler.steps_per_epoch();
  const std::int64_t steps_per_epoch = batches_per_epoch / micro_steps;
  LoopResult result;
  Clock::time_point origin = options.origin;
  bool last_micro = false;
  model.set_grad_ready_callback([&](std::size_t begin, std::size_t end) {
    if (last_micro) strategy.gradient_ready(model.grads(), begin, end);
  });
  try {
    GRADSYNC_CHECK(steps_per_epoch >= 1, "an epoch must hold at least one step's batches");
    const std::int64_t first_step = resume_params(model, options.resume);
    strategy.attach_buffers(model.buffers());
    strategy.init(model.params());
    if (options.origin_at_init) {
      origin = Clock::now();
      if (sinks.trace) sinks.trace->set_origin(origin);
    }
    resume_optimizer(strategy, options.resume);
    // One-time start-up costs (a GPU model's upload and kernel loading) stay out of step 0's
    // time, as a benchmark's warm-up keeps them out of its figures.
    model.prepare(data.train);
    for (std::int64_t step = first_step; step < options.steps; ++step) {
      const Clock::time_point begin = Clock::now();
      double loss = 0;
      const std::int64_t epoch = step / steps_per_epoch;
      // The sampler's epoch of every micro-batch below: augmentation's seed (model/augment.h).
      model.set_epoch(epoch);
      for (int micro = 0; micro < micro_steps; ++micro) {
        // Micro-batch m of step t is batch (t mod steps_per_epoch)*k + m of its epoch, so k
        // micro-batches of B cover the same samples as one batch of k*B
        // (tests/unit/test_allreduce_strategy.cpp holds it).
        last_micro = micro + 1 == micro_steps;
        const std::int64_t batch =
            epoch * batches_per_epoch + (step % steps_per_epoch) * micro_steps + micro;
        loss += model.forward_backward(data.train, sampler.indices(batch), micro_scale, micro > 0) /
                micro_steps;
      }
      const Clock::time_point computed = Clock::now();
      strategy.synchronize(model.grads(), model.params());
      const Clock::time_point end = Clock::now();

      StepStats stats = strategy.last_step_stats();
      stats.compute_s += seconds_between(begin, computed);
      add(result.totals, stats);
      result.train_seconds += seconds_between(begin, end);
      result.step_seconds.push_back(static_cast<float>(seconds_between(begin, end)));
      result.final_loss = loss;
      result.steps = step + 1 - first_step;

      if (sinks.metrics) {
        sinks.metrics->write(
            MetricsRow{step, rank, epoch, seconds_between(origin, end), loss, stats});
      }
      if (sinks.trace && step - first_step < options.trace_steps) {
        trace_step(*sinks.trace, rank, step, begin, computed, end, strategy);
      }
      if (sinks.checkpointer && sinks.checkpointer->due(step + 1)) {
        checkpoint(*sinks.checkpointer, step, model, strategy, sinks.trace,
                   step - first_step < options.trace_steps);
        // Only a step that follows waits for it: not the last one's.
        if (step + 1 < options.steps) result.between_steps_s += seconds_between(end, Clock::now());
      }
      if (options.stop_after && step + 1 < options.steps && options.stop_after(step + 1)) {
        // The run ends here for now: the checkpoint it goes on from, unless one was just saved.
        if (sinks.checkpointer && !sinks.checkpointer->due(step + 1)) {
          checkpoint(*sinks.checkpointer, step, model, strategy, sinks.trace,
                     step - first_step < options.trace_steps);
        }
        result.stopped = true;
        break;
      }
      // Rank 0 evaluates; where the parameters are sharded (zero stage 3) evaluation gathers
      // them, a collective, so every rank runs it and rank 0 keeps what it measured.
      if (rank != 0 && !model.layer_stored()) continue;
      if (rank == 0 && sinks.progress) sinks.progress->update(step, epoch, loss);
      const bool last = step + 1 == options.steps;
      if (!options.evaluate) continue;
      if (last || (options.eval_every > 0 && (step + 1) % options.eval_every == 0)) {
        const Clock::time_point eval_begin = Clock::now();
        const Evaluation eval = model.evaluate(data.test);
        if (rank != 0) continue;
        if (sinks.trace && step - first_step < options.trace_steps) {
          sinks.trace->add_span(rank, "evaluate", step, eval_begin, Clock::now());
        }
        result.evals.push_back({step + 1, result.train_seconds, eval.loss, eval.accuracy});
        if (!last) result.between_steps_s += seconds_between(eval_begin, Clock::now());
      }
    }
    strategy.finish(model.grads(), model.params());
  } catch (const std::exception& e) {
    model.set_grad_ready_callback(nullptr);
    // Before the abort tells the peers (a ps worker's goodbye to its shards): the launcher
    // orders failures by these notes, and this one is the cause of theirs.
    note_failure(e.what());
    strategy.abort("rank " + std::to_string(rank) + " failed: " + e.what());
    throw;
  }
  model.set_grad_ready_callback(nullptr);
  if (rank == 0 && sinks.progress) sinks.progress->finish();
  result.parameters = static_cast<std::int64_t>(model.param_count());
  const ModelStateBytes peaks = ModelStateMemory::instance().peaks();
  result.peak_model_state_bytes = peaks.total;
  result.peak_params_bytes = peaks.params;
  result.peak_grads_bytes = peaks.grads;
  result.peak_optimizer_bytes = peaks.optimizer;
  if (options.keep_params) {
    result.final_params.resize(model.param_count());
    model.copy_params_to_host(result.final_params);
    const std::span<const float> buffers = model.buffers();
    result.final_buffers.assign(buffers.begin(), buffers.end());
  }
  return result;
}

}  // namespace gradsync
