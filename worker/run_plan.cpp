#include "worker/run_plan.h"

#include <algorithm>

#include "common/error.h"
#include "model/sampler.h"
#include "worker/model_factory.h"

namespace gradsync {

// A step's trace holds compute and synchronize, at times checkpoint and evaluate, and a
// communication span per bucket (allreduce) or shard (ps): room for 60 of those a step. The
// loop traces only output.trace_steps steps; this cap only bounds the memory if it did not.
constexpr std::int64_t kSpansPerStep = 4 + 60;

RunPlan plan_run(const Config& config, const TrainTest& data) {
  RunPlan plan;
  const std::int64_t global_batch = std::int64_t{config.train.batch} * config.workers;
  if (data.train.size < global_batch) {
    throw ConfigError(
        config.name, "train.batch",
        std::to_string(config.train.batch) + " per worker x " + std::to_string(config.workers) +
            " workers = " + std::to_string(global_batch) +
            " samples a step, but the training set " + "holds " + std::to_string(data.train.size));
  }
  const std::int64_t batches =
      DistributedSampler(data.train.size, 0, config.workers, config.train.batch, config.train.seed)
          .steps_per_epoch();
  // An optimizer step consumes accumulation_steps batches per rank; an epoch's leftover
  // batches (fewer than that) are dropped, as worker/worker_loop.cpp does.
  plan.steps_per_epoch = batches / config.train.accumulation_steps;
  if (plan.steps_per_epoch < 1) {
    throw ConfigError(config.name, "train.accumulation_steps",
                      std::to_string(config.train.accumulation_steps) +
                          " micro-batches per step, but an epoch holds only " +
                          std::to_string(batches) + " batches per rank");
  }
  plan.steps =
      config.train.steps > 0 ? config.train.steps : config.train.epochs * plan.steps_per_epoch;
  plan.epochs = (plan.steps + plan.steps_per_epoch - 1) / plan.steps_per_epoch;
  plan.samples_per_step = static_cast<std::int64_t>(config.train.batch) * config.workers *
                          config.train.accumulation_steps;
  plan.trace_spans_per_rank = config.output.trace_steps * kSpansPerStep;
  plan.widths = {data.train.dim};
  plan.widths.insert(plan.widths.end(), config.model.hidden.begin(), config.model.hidden.end());
  plan.widths.push_back(data.train.classes);
  return plan;
}

LoopOptions loop_options(const Config& config, const RunPlan& plan, Clock::time_point origin) {
  LoopOptions loop;
  loop.steps = plan.steps;
  loop.eval_every = config.train.eval_every > 0 ? config.train.eval_every : plan.steps_per_epoch;
  loop.trace_steps = config.output.trace_steps;
  loop.accumulation_steps = config.train.accumulation_steps;
  loop.origin = origin;
  loop.evaluate = config.model.kind != "synthetic";
  return loop;
}

ProgressReporter progress_reporter(const Config& config, const RunPlan& plan) {
  return ProgressReporter(config.name, plan.steps, plan.epochs, plan.samples_per_step,
                          relayed_if_asked(parse_progress_mode(config.output.progress)));
}

SgdOptions sgd_options(const Config& config, std::int64_t optimizer_steps) {
  SgdOptions sgd{config.train.lr, config.train.momentum, config.train.weight_decay};
  sgd.schedule = config.train.lr_schedule == "cosine" ? LrSchedule::kCosine : LrSchedule::kConstant;
  sgd.warmup_steps = static_cast<std::uint64_t>(config.train.warmup_steps);
  sgd.total_steps = static_cast<std::uint64_t>(optimizer_steps);
  GRADSYNC_CHECK(sgd.schedule == LrSchedule::kConstant || optimizer_steps > 0,
                 "train.lr_schedule " + config.train.lr_schedule + " needs the run's step count");
  return sgd;
}

std::chrono::milliseconds comm_timeout(const Config& config) {
  return std::chrono::milliseconds(static_cast<long long>(config.comm.timeout_s * 1000.0));
}

StrategyOptions strategy_options(const Config& config, std::int64_t run_steps,
                                 const std::vector<std::string>& ps_endpoints, int rank) {
  StrategyOptions options;
  options.name = config.strategy;
  options.workers = config.workers;
  options.sgd = sgd_options(config, run_steps);
  options.timeout = comm_timeout(config);
  options.link = make_link(emulated_link_gbps(config, rank));
  options.device = model_device(config);
  options.bucket_bytes = bucket_bytes(config);
  options.overlap = config.comm.overlap;
  options.join_uneven = config.comm.uneven_inputs;
  options.broadcast_buffers = config.comm.broadcast_buffers;
  options.sync_batchnorm = config.model.sync_batchnorm;
  options.zero_stage = config.zero.stage;
  options.compression.method = config.comm.compression;
  options.compression.powersgd_rank = config.comm.powersgd_rank;
  options.compression.topk_ratio = config.comm.topk_ratio;
  options.compression.start_step = config.comm.compression_start_step;
  // PowerSGD's Q: drawn alike on every rank, from the run's seed.
  options.compression.seed = config.train.seed ^ 0x5057534744ull;
  options.ps_endpoints = ps_endpoints;
  if (config.strategy == "ps" && !config.ps.curve_keys.empty()) {
    options.ps_curve = read_curve_keys(config.ps.curve_keys);
  }
  options.ps_heartbeat = std::chrono::milliseconds(static_cast<long>(config.ps.heartbeat_s * 1000));
  return options;
}

bool runs_as_processes(const Config& config) {
  return uses_communicator(config.strategy) || config.strategy == "ps";
}

double emulated_link_gbps(const Config& config, int rank) {
  const NetworkConfig& network = config.network;
  if (network.namespaces && runs_as_processes(config)) return 0;
  // A straggler's own NIC (preset checks allow slow ranks only where each rank is a process).
  const bool slow = rank >= 0 && std::find(network.slow_ranks.begin(), network.slow_ranks.end(),
                                           rank) != network.slow_ranks.end();
  return slow ? network.slow_link_gbps : network.link_gbps;
}

std::size_t bucket_bytes(const Config& config) {
  return static_cast<std::size_t>(config.comm.bucket_mb * (1 << 20));
}

}  // namespace gradsync
