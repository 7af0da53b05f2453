// Trains one configuration with every replica in this process: `single` on the calling thread,
// `dp` with one thread per replica. Used by the launcher for in-process strategies and by the
// tests that compare strategies step for step.
#pragma once

#include <cstdint>
#include <vector>

#include "common/config.h"
#include "model/dataset.h"
#include "worker/worker_loop.h"

namespace gradsync {

// Runs every local replica through run_worker_loop and returns their results in rank order.
// Resets the process's model-state peaks first (common/model_state_memory.h): each result's
// peak is this run's, all replicas together. Not to be called while another run trains in
// this process.
// When a replica fails, the others are aborted and the first failure is rethrown.
std::vector<LoopResult> train_in_process(const Config& config, const TrainTest& data,
                                         const LoopOptions& loop, const LoopSinks& rank0_sinks,
                                         const LoopSinks& other_sinks);

}  // namespace gradsync
