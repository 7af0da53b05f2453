#include "experiments/worker_process.h"

#include <cstdlib>
#include <filesystem>

#include "allreduce/tcp/tcp_ring.h"
#include "allreduce/tcp/tcp_store.h"
#include "common/error.h"
#include "common/metrics_writer.h"
#include "common/progress.h"
#include "common/rendezvous_env.h"
#include "common/trace_writer.h"
#include "experiments/data_loader.h"
#include "experiments/run_plan.h"
#include "experiments/preset.h"
#include "experiments/rank_outputs.h"
#include "experiments/worker_loop.h"
#include "strategies/allreduce_strategy.h"
#include "worker/mlp.h"
#include "worker/sampler.h"

namespace gradsync {
namespace fs = std::filesystem;
namespace {

Clock::time_point launcher_origin() {
  const char* text = std::getenv(kOriginEnv);
  if (text == nullptr) return Clock::now();
  return Clock::time_point(std::chrono::nanoseconds(std::strtoll(text, nullptr, 10)));
}

}  // namespace

void run_worker_process(const std::string& config_path, const std::string& run_dir) {
  const RendezvousEnv env = read_rendezvous_env();
  const Preset preset = load_preset(config_path, {});
  GRADSYNC_CHECK(preset.runs.size() == 1, "a worker runs one resolved configuration");
  const Config& config = preset.runs.front();
  if (config.workers != env.world_size) {
    throw ConfigError(config_path, "workers",
                      std::to_string(config.workers) + " in the configuration but WORLD_SIZE (" +
                          env.source + ") is " + std::to_string(env.world_size));
  }
  const auto timeout = std::chrono::milliseconds(static_cast<long>(config.comm.timeout_s * 1000));

  const Clock::time_point origin = launcher_origin();
  const TrainTest data = load_data(config.data, config.train.seed);

  TcpStoreOptions store_options;
  store_options.host = env.master_addr;
  store_options.port = env.master_port;
  store_options.is_server = env.rank == 0;
  store_options.timeout = timeout;
  const std::unique_ptr<Store> store = make_tcp_store(store_options);
  TcpRingOptions ring_options;
  ring_options.timeout = timeout;
  std::shared_ptr<Communicator> comm(make_tcp_ring(*store, env.rank, env.world_size, ring_options));

  AllreduceStrategyOptions strategy_options;
  strategy_options.bucket_bytes = static_cast<std::size_t>(config.comm.bucket_mb * 1e6);
  strategy_options.overlap = config.comm.overlap;
  strategy_options.join_uneven = config.comm.uneven_inputs;
  strategy_options.sgd = {config.train.lr, config.train.momentum, config.train.weight_decay};
  AllreduceStrategy strategy(comm, strategy_options);

  const RunPlan plan = plan_run(config, data);
  Mlp model(plan.widths, config.train.batch);
  model.init_params(config.train.seed);
  DistributedSampler sampler(data.train.size, env.rank, env.world_size, config.train.batch,
                             config.train.seed);

  MetricsWriter metrics((fs::path(run_dir) / "metrics.csv").string(),
                        MetricsWriter::Mode::kAppend);
  TraceWriter trace(origin, plan.trace_spans_per_rank);
  ProgressReporter progress = progress_reporter(config, plan);
  const LoopResult result =
      run_worker_loop(model, strategy, sampler, data, loop_options(config, plan, origin),
                      LoopSinks{&metrics, &trace, env.rank == 0 ? &progress : nullptr});
  trace.write(rank_trace_path(run_dir, env.rank));
  write_rank_result(rank_result_path(run_dir, env.rank), result);
}

}  // namespace gradsync
