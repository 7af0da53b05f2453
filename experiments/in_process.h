// Trains one configuration with every replica in this process: `single` on the calling thread,
// `dp` with one thread per replica. Used by the launcher for in-process strategies and by the
// tests that compare strategies step for step.
#pragma once

#include <cstdint>
#include <vector>

#include "experiments/config.h"
#include "experiments/worker_loop.h"
#include "worker/dataset.h"

namespace gradsync {

// Optimizer steps the run will take: train.steps, or train.epochs whole epochs of the
// distributed sampler (an optimizer step takes train.accumulation_steps batches per rank).
std::int64_t planned_steps(const Config& config, const TrainTest& data);
std::int64_t steps_per_epoch(const Config& config, const TrainTest& data);

// Runs every local replica through run_worker_loop and returns their results in rank order.
// When a replica fails, the others are aborted and the first failure is rethrown.
std::vector<LoopResult> train_in_process(const Config& config, const TrainTest& data,
                                         const LoopOptions& loop, const LoopSinks& rank0_sinks,
                                         const LoopSinks& other_sinks);

}  // namespace gradsync
