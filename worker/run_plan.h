// The numbers a run derives from its configuration and data before it starts, computed in one
// place for the in-process runner and for `gradsync worker` alike.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/progress.h"
#include "common/stopwatch.h"
#include "model/dataset.h"
#include "model/optimizer/sgd.h"
#include "strategies/make_strategy.h"
#include "worker/worker_loop.h"

namespace gradsync {

struct RunPlan {
  std::int64_t steps = 0;             // optimizer steps: train.steps, or train.epochs epochs
  std::int64_t steps_per_epoch = 0;   // optimizer steps (accumulation_steps batches each)
  std::int64_t epochs = 0;            // epochs touched, for the progress line
  std::int64_t samples_per_step = 0;  // global: batch * workers * accumulation_steps
  std::int64_t trace_spans_per_rank = 0;
  std::vector<int> widths;  // the MLP: input, hidden..., classes
};

RunPlan plan_run(const Config& config, const TrainTest& data);

LoopOptions loop_options(const Config& config, const RunPlan& plan, Clock::time_point origin);

ProgressReporter progress_reporter(const Config& config, const RunPlan& plan);

// The optimizer of train.*, wherever a strategy runs it (worker, replica 0, server shards), over
// a run of `optimizer_steps` (RunPlan::steps; a ps shard applying each push on its own, steps
// times workers): the horizon of train.lr_schedule. 0 only where the schedule is constant.
SgdOptions sgd_options(const Config& config, std::int64_t optimizer_steps = 0);

// comm.timeout_s: the deadline of every wait on another rank, replica or shard.
std::chrono::milliseconds comm_timeout(const Config& config);

// What make_strategies needs for any strategy; `ps_endpoints` are the shards of a ps worker
// (gradsync worker --ps-endpoints), one per ps.servers. `rank`: the worker process's rank, whose
// link may be one of network.slow_ranks; -1 for the in-process strategies (single, dp).
// `run_steps`: RunPlan::steps, the horizon of train.lr_schedule.
StrategyOptions strategy_options(const Config& config, std::int64_t run_steps = 0,
                                 const std::vector<std::string>& ps_endpoints = {}, int rank = -1);

// The rate the transports' emulated links enforce: network.link_gbps, unless the kernel shapes
// this run's links (network.namespaces, for runs of several processes); for a worker `rank`
// listed in network.slow_ranks, network.slow_link_gbps. rank -1: no worker (a shard).
double emulated_link_gbps(const Config& config, int rank = -1);

// Whether the run is one process per rank (allreduce, ps) rather than threads of one (single, dp).
bool runs_as_processes(const Config& config);

// comm.bucket_mb in bytes; MB here means MiB, as in DDP's bucket_cap_mb.
std::size_t bucket_bytes(const Config& config);

}  // namespace gradsync
