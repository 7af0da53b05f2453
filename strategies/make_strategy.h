// make_strategies: every strategy gradsync knows, built in one place, one per local replica.
//
//   auto replicas = make_strategies(options);                        // single, dp: in-process
//   auto mine = make_strategies(options, {rank, &model, comm});      // allreduce, ps: one rank
//
// `single` gives one; `dp` gives `workers` replicas that share one DataParallel group (they
// must run on separate threads, since each synchronize() waits for the others). `allreduce`
// and `ps` run one process per rank: they give this process's one strategy and need its
// ProcessContext (allreduce over the communicator it carries, ps over ZeroMQ to
// options.ps_endpoints). A wrong name throws gradsync::ConfigError listing the valid ones; so
// does an in-process strategy given a process context, or a process strategy without one.
//
// Batch norm: `allreduce` gets comm.broadcast_buffers (`broadcast_buffers`); with
// `sync_batchnorm` (model.sync_batchnorm) allreduce and zero set the rank's model's batch-stats
// reducer to a blocking all-reduce (sum) over the rank's communicator, run in forward and
// backward (SyncBatchNorm). Collectives run in issue order on every rank, so these interleave
// with the buckets backward has in flight the same way everywhere; they sit inside the loop's
// compute time, and their bytes count in the step's traffic. single takes it as a no-op (one
// replica: its statistics are the global batch's); dp and ps refuse it with a ConfigError.
//
// With `device` >= 0 the models live on GPUs: `single` updates on that device, `dp` is the
// GPU group of strategies/dp/dp_gpu_strategy.h (replica r's model on device r; a build with NCCL
// and at least `workers` visible GPUs; without them: ConfigError naming key `device`),
// `allreduce` reduces device buffers over its (NCCL) communicator, and `ps` goes through pinned
// host copies (strategies/ps/host_staged_strategy.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "allreduce/communicator.h"
#include "common/link.h"
#include "model/model.h"
#include "model/optimizer/sgd_options.h"
#include "server/curve_keys.h"
#include "strategies/allreduce/bucket_reducer.h"
#include "strategies/sync_strategy.h"

namespace gradsync {

struct StrategyOptions {
  std::string name = "single";
  int workers = 1;
  SgdOptions sgd;
  std::chrono::milliseconds timeout{60000};  // any wait on another replica, rank or shard
  std::shared_ptr<Link> link;                // network.link_gbps: this process's link; null: none
  int device = -1;  // -1: models in host memory; else the CUDA ordinal of replica 0's model
  // allreduce (DistributedDataParallel's bucket_cap_mb, overlap with backward, Join)
  std::size_t bucket_bytes = 25u << 20;
  bool overlap = true;
  bool join_uneven = false;
  bool broadcast_buffers = true;  // comm.broadcast_buffers (allreduce, zero)
  bool sync_batchnorm = false;    // model.sync_batchnorm (allreduce, zero; single: no-op)
  // comm.compression and its keys (strategies/allreduce/bucket_reducer.h); the tensors
  // come from the rank's model
  CompressionOptions compression;
  int zero_stage = 1;  // zero: zero.stage
  // ps: one endpoint per shard, the shared CURVE pair, the heartbeat period
  std::vector<std::string> ps_endpoints;
  std::optional<CurveKeys> ps_curve;
  std::chrono::milliseconds ps_heartbeat{1000};
  std::uint64_t ps_run_id = 0;  // the run's id, which the shards check (common/run_id.h)
  // Reach a shard on loopback through its ipc address (server/local_endpoint.h); the shards
  // then listen there too (PsShardOptions::bind_ipc).
  bool ps_ipc = false;
};

// A worker process's place, for the strategies that run one process per rank.
struct ProcessContext {
  int rank = 0;
  Model* model = nullptr;  // the model this rank trains: its device (and a GPU model's stream)
  // allreduce: the communicator over every rank (strategies/allreduce/model_communicator.h),
  // made by the caller, which keeps it for its own barriers.
  std::shared_ptr<Communicator> comm;
  std::uint64_t first_step = 0;  // > 0: resuming from a checkpoint of that step
};

// The strategy names gradsync knows, in the order the docs list them.
const std::vector<std::string>& strategy_names();

std::vector<std::unique_ptr<SyncStrategy>> make_strategies(
    const StrategyOptions& options, const std::optional<ProcessContext>& process = std::nullopt);

// Why model.sync_batchnorm is refused for `strategy` ("dp", "ps", or "join" for allreduce with
// comm.uneven_inputs): the message of the ConfigError make_strategies and the preset checks give.
std::string sync_batchnorm_refusal(const std::string& strategy);

// Throws the ConfigError make_strategies gives `dp` on GPUs in this build and on this machine
// (no NCCL, fewer GPUs than replicas), without making anything: checked before a run starts.
void check_dp_on_gpus(int workers);

}  // namespace gradsync
