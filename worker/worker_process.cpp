#include "worker/worker_process.h"

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>

#include "allreduce/tcp/tcp_ring.h"
#include "common/error.h"
#include "common/progress.h"
#include "common/run_id.h"
#include "launch/rendezvous_env.h"
#include "model/data_loader.h"
#include "model/sampler.h"
#include "strategies/allreduce/model_communicator.h"
#include "strategies/make_strategy.h"
#include "worker/checkpoints.h"
#include "worker/job_rendezvous.h"
#include "worker/metrics_writer.h"
#include "worker/model_factory.h"
#include "worker/rank_outputs.h"
#include "worker/run_plan.h"
#include "worker/server_process.h"
#include "worker/stop_request.h"
#include "worker/trace_writer.h"
#include "worker/worker_loop.h"

namespace gradsync {
namespace fs = std::filesystem;

namespace {

// A launch rank past the workers: shard (rank - workers), listening on an ephemeral port of the
// address this host reaches rank 0 from, which it posts in the store for the workers.
void serve_as_shard(const Config& config, const RendezvousEnv& env, Store& store,
                    const std::string& run_dir, std::uint64_t run_id) {
  const int shard = env.rank - env.world_size;
  run_server_process(
      config, run_dir, shard, 0, run_id, local_address_towards(env.master_addr, env.master_port),
      [&](const std::string& endpoint) { post_shard_endpoint(store, shard, endpoint); });
}

// allreduce: the communicator over every rank, formed through the store, of comm.backend
// (auto: TcpRing for a model in host memory, NCCL on the model's GPU). The store must outlive it: a
// ring keeps it for failure reports.
std::shared_ptr<Communicator> connect_ranks(const Config& config, const StrategyOptions& strategy,
                                            const RendezvousEnv& env, Model& model, Store& store) {
  TcpRingOptions ring_options;
  ring_options.timeout = strategy.timeout;
  // Neighbours must reach this rank's ring port at an address of this host; the one this host
  // uses to reach rank 0 is the one the job's network routes (127.0.0.1 on one machine).
  ring_options.bind_host = local_address_towards(env.master_addr, env.master_port);
  ring_options.link = strategy.link;  // this process's emulated NIC (network.link_gbps)
  CommunicatorOptions options;
  options.backend = config.comm.backend;
  options.algorithm = config.comm.algorithm;
  options.gloo_pairs = config.comm.gloo_pairs;
  options.desync_check = config.comm.desync_check;
  options.tcp = ring_options;
  // Names a shared-memory segment after the run, so the launcher finds what a kill left.
  options.run_id = run_id_from_env().value_or(0);
  // auto picks shared memory for ranks of one host, unless gradsync's own emulated link must
  // carry every byte (network.link_gbps, slow ranks). In namespaces the kernel shapes each host's
  // veth and every process is told its simulated host (common/host_id.h): ranks of one host
  // may share memory there, as on a real machine, and no byte between hosts escapes the link.
  const NetworkConfig& network = config.network;
  options.shm_on_one_host =
      network.slow_ranks.empty() && (network.namespaces || network.link_gbps <= 0);
  options.hierarchical = config.comm.hierarchical;
  return make_model_communicator(store, env.rank, env.world_size, options, model);
}

// allreduce over NCCL needs a GPU per rank on each host: refused before the store, the run
// folder or the model exist (check_gpu_per_rank), from the ranks the launcher put on this
// host. One GPU seen through CUDA_VISIBLE_DEVICES while several ranks share the host is a
// launcher giving each process its own (srun --gpus-per-task=1 binds so), which a process
// cannot tell from ranks sharing one GPU: that case is left to ncclCommInitRank, which fails
// if they do share it ("Duplicate GPU detected").
void check_local_ranks_per_gpu(const Config& config, const RendezvousEnv& launch) {
  if (!reduces_over_nccl(config)) return;
  const int visible = visible_gpus();
  if (visible == 0) return;  // make_model refuses, with the runtime's reason
  if (visible == 1 && std::getenv("CUDA_VISIBLE_DEVICES") != nullptr) return;
  check_gpu_per_rank(config, launch.local_world_size, visible);
}

}  // namespace

// The ranks of comm.backend mpi are the processes of one MPI job, which only an MPI launcher
// makes (MPI_Init alone would make a job of one). The variables are those Open MPI's mpirun,
// MPICH's Hydra and PMIx set.
void check_mpi_launcher(const Config& config, const std::string& preset) {
  if (config.strategy != "allreduce" || config.comm.backend != "mpi") return;
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    if (std::getenv(name) != nullptr) return;
  }
  const std::string name = preset.empty() ? "PRESET" : preset;
  throw ConfigError(config.name, "comm.backend",
                    "mpi ranks are the processes of one MPI job, and this process was not "
                    "started by an MPI launcher (no OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK): "
                    "start the ranks with mpirun -np " +
                        std::to_string(config.workers) + " gradsync worker " + name + " --only " +
                        config.name + ", or with gradsync run, which uses mpirun");
}

int ps_workers(const Config& config, int launched) {
  const int workers = launched - config.ps.servers;
  if (workers < 1) {
    throw ConfigError("environment", "WORLD_SIZE",
                      std::to_string(launched) + " ranks launched for ps with ps.servers = " +
                          std::to_string(config.ps.servers) +
                          ": the last ps.servers ranks serve, which leaves no worker");
  }
  return workers;
}

void run_worker_process(const Config& given, const WorkerProcessOptions& options) {
  Config config = given;
  check_mpi_launcher(config, options.preset_name);
  const RendezvousEnv launch = read_rendezvous_env();
  RendezvousEnv env = launch;  // as the strategy sees it: the workers alone under ps roles
  // ps under another launcher, without --ps-endpoints: the last ps.servers ranks of the launch
  // serve the key ranges, as ps-lite assigns roles; the others train, as ranks 0..N-1 of N.
  const bool ps_roles = config.strategy == "ps" && options.ps_endpoints.empty();
  if (ps_roles) env.world_size = ps_workers(config, env.world_size);
  if (config.workers != env.world_size) {
    throw ConfigError(options.config_path, "workers",
                      std::to_string(config.workers) + " in the configuration but " +
                          (ps_roles ? "the launch has " : "WORLD_SIZE (" + env.source + ") is ") +
                          std::to_string(env.world_size) + (ps_roles ? " workers" : ""));
  }
  std::vector<std::string> ps_endpoints = options.ps_endpoints;
  if (config.strategy == "ps" && !ps_roles &&
      ps_endpoints.size() != static_cast<std::size_t>(config.ps.servers)) {
    throw ConfigError("command line", "--ps-endpoints",
                      std::to_string(ps_endpoints.size()) + " endpoints given, ps.servers is " +
                          std::to_string(config.ps.servers));
  }
  check_local_ranks_per_gpu(config, launch);
  const auto timeout = comm_timeout(config);
  // Under `gradsync run` the launcher made the folder and wrote the header; under mpirun, srun
  // or torchrun rank 0 does, before any rank can write a row (rows start after the strategy's
  // first barrier).
  const bool launched_by_gradsync = std::getenv(kOriginEnv) != nullptr;
  // Under another launcher, say which of its variables placed the ranks (rank 0, once).
  if (!launched_by_gradsync && env.rank == 0)
    std::cerr << "gradsync: " << launch.describe() << "\n";
  // The store outlives the strategy: a ring keeps it for failure reports.
  const std::unique_ptr<Store> store = connect_store(env, timeout);
  const RunFolder folder =
      agree_on_run_folder(*store, env, config,
                          {options.run_dir, options.preset_name, options.config_yaml,
                           options.restart, launched_by_gradsync},
                          timeout);
  const std::string& run_dir = folder.dir;
  if (folder.restarted) config.checkpoint.resume = folder.resume;
  // What this run's ps workers show their shards: shards started apart (--ps-endpoints) share
  // the configuration file with them, or GRADSYNC_RUN_ID; ps roles share the store.
  std::uint64_t run_id = 0;
  if (ps_roles) {
    run_id = shared_run_id(*store, launch.rank, timeout);
    if (env.rank >= env.world_size) return serve_as_shard(config, env, *store, run_dir, run_id);
    ps_endpoints = shard_endpoints(*store, config.ps.servers, timeout);
  } else if (config.strategy == "ps") {
    run_id = run_id_for(options.config_yaml);
  }

  const Clock::time_point origin = launcher_origin().value_or(Clock::now());
  const TrainTest data = load_data(config.data, config.train.seed);
  const RunPlan plan = plan_run(config, data);
  // Declared before the strategy, so destroyed after it: a failing step may leave a bucket
  // reduction in flight over the model's gradient buffer, and the strategy waits for it.
  const std::unique_ptr<Model> model =
      make_model(config, plan.widths, config.train.batch, model_device(config));
  DistributedSampler sampler(data.train.size, env.rank, env.world_size, config.train.batch,
                             config.train.seed);
  // A restart keeps the rows before its checkpoint (prepare_restart left them and the header).
  const bool creates_metrics = !launched_by_gradsync && env.rank == 0 && !folder.restarted;
  MetricsWriter metrics(
      (fs::path(run_dir) / "metrics.csv").string(),
      creates_metrics ? MetricsWriter::Mode::kCreate : MetricsWriter::Mode::kAppend);
  TraceWriter trace(origin, plan.trace_spans_per_rank);
  ProgressReporter progress = progress_reporter(config, plan);
  const RunCheckpoints checkpoints =
      prepare_checkpoints(config, plan.widths, plan.steps, run_dir, env.rank);
  // Under `gradsync run` the launcher said it already.
  if (!launched_by_gradsync && env.rank == 0 && checkpoints.resume) {
    note_changed_settings(config, checkpoints.resumed_from);
  }
  LoopOptions loop = loop_options(config, plan, origin);
  loop.origin_at_init = !launched_by_gradsync;  // each rank's own start would not line up
  if (checkpoints.resume) loop.resume = &*checkpoints.resume;
  LoopSinks sinks{&metrics, &trace, env.rank == 0 ? &progress : nullptr};
  if (checkpoints.writer) sinks.checkpointer = &*checkpoints.writer;
  // Under a scheduler, SIGTERM or SIGUSR1 stop the ring's ranks after one agreed step, rank 0
  // checkpointing it even when checkpoint.every asks for none. (ps workers keep the default
  // action: their shards hold the parameters, and no step is agreed with them.)
  std::optional<StopRequest> stop;
  std::optional<Checkpointer> stop_checkpointer;
  if (!launched_by_gradsync && config.strategy == "allreduce") {
    stop.emplace(*store, env.rank, env.world_size, timeout);
    loop.stop_after = [&](std::int64_t done) { return stop->stop_after(done); };
    if (env.rank == 0 && !sinks.checkpointer) {
      stop_checkpointer.emplace(checkpoint_root(config, run_dir), 0, plan.steps,
                                model_description(config, plan.widths), training_settings(config));
      sinks.checkpointer = &*stop_checkpointer;
    }
  }

  StrategyOptions strategy_settings = strategy_options(config, plan.steps, ps_endpoints, env.rank);
  strategy_settings.ps_run_id = run_id;
  strategy_settings.ps_ipc = true;     // shards on this host: ipc, not loopback tcp
  std::shared_ptr<Communicator> comm;  // allreduce and zero only
  if (uses_communicator(config.strategy))
    comm = connect_ranks(config, strategy_settings, env, *model, *store);
  const ProcessContext process{.rank = env.rank,
                               .model = model.get(),
                               .comm = comm,
                               .first_step = checkpoints.resume ? checkpoints.resume->step : 0};
  std::unique_ptr<SyncStrategy> strategy =
      std::move(make_strategies(strategy_settings, process).front());
  // allreduce ranks resolve --resume each on their own host (ps workers take the step from the
  // shards, which refuse a push of another step): they must agree before training.
  if (comm && checkpoints.resume) {
    agree_on_resumed_step(*store, env.rank, checkpoints.resume->step, checkpoints.resumed_from,
                          timeout);
  }
  LoopResult result;
  try {
    result = run_worker_loop(*model, *strategy, sampler, data, loop, sinks);
  } catch (...) {
    // The steps before the failure are worth seeing in the trace; the failure itself is what
    // the caller reports, so a trace that cannot be written must not replace it.
    try {
      trace.write(rank_trace_path(run_dir, env.rank));
    } catch (...) {
    }
    throw;
  }
  trace.write(rank_trace_path(run_dir, env.rank));
  if (comm) result.backend = comm->backend();
  if (result.stopped) {
    // Nobody leaves before rank 0's checkpoint is whole: a launcher that ends the job once the
    // first rank exits (srun --kill-on-bad-exit) must not cut it short.
    comm->barrier();
    const std::int64_t done =
        checkpoints.resume ? static_cast<std::int64_t>(checkpoints.resume->step) + result.steps
                           : result.steps;
    throw Interrupted(stop->signal(),
                      std::string(stop->signal() == SIGUSR1 ? "SIGUSR1" : "SIGTERM") +
                          ": stopped after step " + std::to_string(done) + " of " +
                          std::to_string(plan.steps) + " with every rank; checkpoint " +
                          checkpoint_step_folder(checkpoint_root(config, run_dir), done) +
                          " (go on with the same command and --resume auto)");
  }
  write_rank_result(rank_result_path(run_dir, env.rank), result);
  // Without `gradsync run` nobody else folds the ranks' files into summary.json and trace.json:
  // rank 0 does, once every rank has written its own: the ring's barrier says so; ps workers
  // share no communicator, so rank 0 leaves the shards first (they write their traffic once
  // every worker has) and then waits for the files themselves.
  if (launched_by_gradsync) return;
  if (comm) {
    comm->barrier();
    if (env.rank == 0) fold_rank_outputs(config, run_dir);
  } else if (env.rank == 0) {
    strategy.reset();
    wait_for_run_outputs(config, run_dir, env.rank, timeout);
    fold_rank_outputs(config, run_dir);
  }
}

}  // namespace gradsync
