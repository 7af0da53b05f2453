#include "experiments/run_experiment.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <new>
#include <optional>

#include "allreduce/make_communicator.h"
#include "allreduce/shm/shm_segment.h"
#include "allreduce/tcp/socket.h"
#include "common/atomic_file.h"
#include "common/error.h"
#include "common/host_id.h"
#include "common/progress.h"
#include "common/run_id.h"
#include "experiments/host_links.h"
#include "experiments/kept_results.h"
#include "experiments/memory_estimate.h"
#include "experiments/run_backend.h"
#include "launch/inherited_socket.h"
#include "launch/launcher.h"
#include "launch/namespace_network.h"
#include "model/data_loader.h"
#include "worker/checkpoints.h"
#include "worker/in_process.h"
#include "worker/metrics_writer.h"
#include "worker/model_factory.h"
#include "worker/provenance.h"
#include "worker/rank_outputs.h"
#include "worker/run_folder.h"
#include "worker/run_plan.h"
#include "worker/trace_writer.h"
#include "worker/worker_process.h"

namespace gradsync {
namespace fs = std::filesystem;
namespace {

void write_text(const fs::path& path, const std::string& text) {
  write_file_atomically(path.string(), text);
}

void report(const RunOutcome& run) {
  std::cerr << "gradsync: run " << run.summary.run << ": "
            << static_cast<long long>(run.summary.samples_per_s) << " samples/s";
  // A synthetic model has no test set: no accuracy to report, rather than a misleading 0%.
  if (!run.summary.evals.empty()) {
    std::cerr << ", test accuracy " << run.summary.final_test_accuracy * 100.0 << "%";
  }
  // In namespaces: what the kernel put on the workers' links (summary.json, host_link_bytes).
  if (run.summary.link_bytes_per_step) {
    char mib[32];
    std::snprintf(mib, sizeof mib, "%.2f", *run.summary.link_bytes_per_step / (1 << 20));
    std::cerr << ", " << mib << " MiB a step on the workers' links";
  }
  std::cerr << "\n";
}

// checkpoint.resume as the canonical path of the step folder it names for this run, so every
// process of the run (and config.yaml) says exactly which checkpoint was resumed.
Config with_resolved_checkpoint(const Config& given) {
  Config config = given;
  validate_checkpointing(config);
  if (!config.checkpoint.resume.empty()) {
    // Canonical: `results/latest/...` must keep naming this checkpoint once `latest` moves on.
    config.checkpoint.resume =
        fs::canonical(resolve_checkpoint(config.checkpoint.resume, config.name)).string();
  }
  return config;
}

// A std::bad_alloc the memory check did not foresee ends as one line naming the run.
template <typename F>
auto naming_the_run(const Config& config, const DataShape& data, std::optional<double> available,
                    F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    throw out_of_memory(config, data, available);
  }
}

}  // namespace

RunOutcome run_multi_process(const Config& config, const std::string& run_dir, int max_restarts) {
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) throw Error(run_dir + ": cannot create run folder: " + ec.message());
  const std::string config_path = (fs::path(run_dir) / "config.yaml").string();
  write_text(config_path, to_yaml(config));
  // The ranks append to it; the header is written once, here.
  { MetricsWriter header((fs::path(run_dir) / "metrics.csv").string()); }

  const std::string exe = current_executable();
  // network.namespaces: one namespace per simulated host, each with its own address and port
  // space: every shard one, and every rank one, or with network.hosts a block of ranks
  // (namespace_of_processes, processes numbered shards first, then ranks); torn down when this
  // function returns, however it returns.
  const int shards = config.strategy == "ps" ? config.ps.servers : 0;
  // Before the network: Ctrl-C while it is made (or while the ranks run) must still lead to its
  // teardown, not kill this process with the namespaces left in the kernel. launch() acts on it.
  const InterruptGuard interrupts;
  std::optional<NamespaceNetwork> network;
  std::vector<int> netns_of;  // each process's namespace
  if (config.network.namespaces) {
    netns_of = namespace_of_processes(shards, config.workers, config.network.hosts);
    network.emplace(netns_of.back() + 1, config.network.link_gbps);
  }
  auto host_of = [&](int process) {
    return network ? network->address(netns_of[process]) : std::string("127.0.0.1");
  };
  // Rank 0's store socket, bound here and kept bound until the run ends: no other process can
  // take its port before rank 0 serves on it (handed down as kStoreFdEnv). mpirun does not pass
  // descriptors on: there the port is held (tcp::hold_port) and rank 0 shares it. In namespaces
  // each host has a port space of its own, where no process of another run lives: the ports
  // there are fixed. Ranks of one simulated host share it, which the fixed ports allow: only
  // rank 0 binds the store's, each shard has a namespace of its own, and the ring and gloo
  // listen on ports the kernel picks.
  std::optional<tcp::Socket> store_socket, store_port_held;
  std::vector<tcp::Socket> shard_sockets;  // likewise, each ps shard's
  if (!network && starts_under_mpirun(config)) {
    store_port_held = tcp::hold_port("127.0.0.1");
  } else if (!network) {
    store_socket = tcp::listen_on("127.0.0.1", 0);
  }
  const tcp::Socket* store_port = store_socket ? &*store_socket : nullptr;
  if (store_port_held) store_port = &*store_port_held;
  const std::string port = store_port ? std::to_string(tcp::local_port(*store_port)) : "29500";
  const auto origin_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  const std::uint64_t run_number = draw_run_id();  // common/run_id.h
  const std::string run_id = run_id_text(run_number);
  // Whatever way the run ends: a shared-memory segment a killed rank 0 left before unlinking
  // it (allreduce/shm/shm_segment.h) goes with the run.
  struct RemoveSegments {
    std::uint64_t run;
    ~RemoveSegments() { remove_run_segments(run); }
  } remove_segments{run_number};
  std::vector<ProcessSpec> processes;
  std::vector<std::string> worker_args = {exe,         "worker",    "--config",
                                          config_path, "--run-dir", run_dir};
  if (config.strategy == "ps") {
    // Shards first: workers connect to them (ZeroMQ retries until they listen).
    std::string endpoints;
    for (int k = 0; k < shards; ++k) {
      // Bound here and handed down, as rank 0's store socket is (not in namespaces).
      if (!network) shard_sockets.push_back(tcp::listen_on("127.0.0.1", 0));
      const std::string shard_port =
          network ? "29600" : std::to_string(tcp::local_port(shard_sockets.back()));
      if (k > 0) endpoints += ",";
      endpoints += "tcp://" + host_of(k) + ":" + shard_port;
      std::vector<std::string> argv = {exe,         "server",  "--config", config_path,
                                       "--run-dir", run_dir,   "--shard",  std::to_string(k),
                                       "--port",    shard_port};
      if (network) argv.insert(argv.end(), {"--bind", host_of(k)});
      // The ranks' time zero too: the shard's trace spans then share their time axis exactly.
      processes.push_back(
          {"server " + std::to_string(k), argv, {{kOriginEnv, std::to_string(origin_ns)}}});
      if (!network) {
        const int fd = shard_sockets.back().fd();
        processes.back().env.emplace_back(kShardFdEnv, std::to_string(fd));
        processes.back().keep_fds = {fd};
      }
    }
    worker_args.insert(worker_args.end(), {"--ps-endpoints", endpoints});
  }
  if (starts_under_mpirun(config)) {
    processes.push_back(
        mpirun_process(config, worker_args, host_of(shards), port, origin_ns, run_id));
  } else {
    for (int r = 0; r < config.workers; ++r) {
      processes.push_back({"rank " + std::to_string(r),
                           worker_args,
                           {{"RANK", std::to_string(r)},
                            {"WORLD_SIZE", std::to_string(config.workers)},
                            {"LOCAL_RANK", std::to_string(r)},
                            {"MASTER_ADDR", host_of(shards)},
                            {"MASTER_PORT", port},
                            {kOriginEnv, std::to_string(origin_ns)}}});
      // The shards drop a worker that dies or stops, and serve the others (async and ssp).
      processes.back().expendable =
          config.strategy == "ps" && config.ps.continue_without_dead_workers;
      if (r == 0 && store_socket) {
        processes.back().env.emplace_back(kStoreFdEnv, std::to_string(store_socket->fd()));
        processes.back().keep_fds = {store_socket->fd()};
      }
    }
  }
  // Every process of this run presents the same id, which no other run's process has.
  for (ProcessSpec& process : processes) process.env.emplace_back(kRunIdEnv, run_id);
  if (network) {
    for (std::size_t i = 0; i < processes.size(); ++i) {
      const int ns = netns_of[i];
      processes[i].argv = network->wrap(ns, processes[i].argv);
      // Its simulated host: processes of one namespace may share memory, as on one machine;
      // the others are reached only over the shaped link.
      processes[i].env.emplace_back(kHostIdEnv, network->namespace_name(ns));
    }
  }
  // The links' counters before the attempt that completes: summary.json counts that one's bytes,
  // as it does its ranks' results.
  std::vector<LinkBytes> counted_from;
  const std::vector<std::string> traces = run_trace_paths(config, run_dir);
  // A run that drops its dead workers goes on without them: restarting it would undo that.
  const bool drops_workers = config.strategy == "ps" && config.ps.continue_without_dead_workers;
  if (drops_workers && max_restarts > 0) {
    std::cerr << "gradsync: run " << config.name << ": --max-restarts does not apply: "
              << "ps.continue_without_dead_workers drops a dead worker instead\n";
    max_restarts = 0;
  }
  try {
    for (int restart = 1;; ++restart) {
      if (network) counted_from = link_counts(*network);
      try {
        LaunchOptions launch_options;
        // Outside the results: a full results disk must not silence the notes that name it.
        launch_options.failure_dir =
            (fs::temp_directory_path() / ("gradsync-failures-" + std::to_string(::getpid())))
                .string();
        launch(processes, launch_options);
        break;
      } catch (const Interrupted&) {
        throw;  // the user stopped it: not a failure to restart after
      } catch (const std::exception& e) {
        if (restart > max_restarts) throw;
        // Every process of the failed attempt has ended: the new one starts from the newest
        // complete checkpoint, which config.yaml names for the workers and shards to read.
        Config again = config;
        again.checkpoint.resume = prepare_restart(config, run_dir);
        write_text(config_path, to_yaml(again));
        std::cerr << "gradsync: run " << config.name << ": restart " << restart << " of "
                  << max_restarts << ", from "
                  << (again.checkpoint.resume.empty() ? std::string("the start")
                                                      : again.checkpoint.resume)
                  << ", after: " << e.what() << "\n";
      }
    }
  } catch (...) {
    // Keep what the ranks wrote up to the failure; the failure is what gets reported, so a
    // trace that cannot be merged must not replace it.
    try {
      merge_traces(traces, (fs::path(run_dir) / "trace.json").string());
    } catch (...) {
    }
    throw;
  }
  // Every process has ended, and the namespaces are still there: their counters are final.
  std::vector<HostLink> links;
  if (network) links = host_links(config, *network, netns_of, shards, counted_from);
  return RunOutcome{fold_rank_outputs(config, run_dir, std::move(links)), run_dir};
}

RunOutcome run_experiment(const Config& config, const TrainTest& data, const std::string& run_dir) {
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) throw Error(run_dir + ": cannot create run folder: " + ec.message());
  write_text(fs::path(run_dir) / "config.yaml", to_yaml(config));

  const RunPlan plan = plan_run(config, data);
  const Clock::time_point origin = Clock::now();
  MetricsWriter metrics((fs::path(run_dir) / "metrics.csv").string());
  TraceWriter trace(origin, plan.trace_spans_per_rank);
  ProgressReporter progress = progress_reporter(config, plan);
  const RunCheckpoints checkpoints =
      prepare_checkpoints(config, plan.widths, plan.steps, run_dir, 0);
  LoopOptions loop = loop_options(config, plan, origin);
  if (checkpoints.resume) loop.resume = &*checkpoints.resume;
  LoopSinks rank0{&metrics, &trace, &progress};
  if (checkpoints.writer) rank0.checkpointer = &*checkpoints.writer;
  std::vector<LoopResult> results;
  try {
    results = train_in_process(config, data, loop, rank0, LoopSinks{&metrics, &trace, nullptr});
  } catch (...) {
    // The steps before the failure are worth seeing in the trace (as a worker process keeps
    // its own); the failure is what gets reported, so a trace that cannot be written must not
    // replace it.
    try {
      trace.write((fs::path(run_dir) / "trace.json").string());
    } catch (...) {
    }
    throw;
  }

  trace.write((fs::path(run_dir) / "trace.json").string());
  RunOutcome outcome{summarize(config, results.front().parameters, results), run_dir};
  write_summary((fs::path(run_dir) / "summary.json").string(), outcome.summary);
  return outcome;
}

PresetOutcome run_preset(const Preset& preset, const std::string& output_dir, int max_restarts) {
  GRADSYNC_CHECK(!preset.runs.empty(), "a preset has at least one run");
  const fs::path root =
      output_dir.empty() ? fs::path(preset.runs.front().output.dir) : fs::path(output_dir);
  // Checkpoints are found (and named checkpoint folders checked) before the new results folder
  // exists: `--resume results/latest` means the run before this one, not this one.
  std::vector<Config> configs;
  // One reading for every run: they run one after the other, each freeing what it took.
  const std::optional<double> available = available_memory();
  for (const Config& given : preset.runs) {
    configs.push_back(with_resolved_checkpoint(given));
    claim_checkpoint_root(configs.back());
    // A run this machine cannot start is refused before the results folder exists.
    check_device_available(configs.back());
    check_backend_available(configs.back());
    check_namespaces_allowed(configs.back());
    // Before its data is made: synthetic data is counted from its keys, a data set of files as
    // empty (it is checked again below, once loaded), so the model alone can be refused here.
    check_memory(configs.back(), data_shape(configs.back().data), available);
    // checkpoint.resume is the resolved step folder now.
    if (!configs.back().checkpoint.resume.empty()) {
      note_changed_settings(configs.back(), configs.back().checkpoint.resume);
    }
  }
  // Runs of one preset usually share their data: load it once.
  TrainTest cached;
  std::optional<std::pair<DataConfig, std::uint64_t>> cached_for;
  auto data_for = [&](const Config& config) -> const TrainTest& {
    if (!cached_for || cached_for->first != config.data ||
        cached_for->second != config.train.seed) {
      cached = load_data(config.data, config.train.seed);
      cached_for.emplace(config.data, config.train.seed);
    }
    return cached;
  };
  // Every run's plan (batch against the data, steps per epoch), its memory against the data's
  // real shape, and the checkpoint it resumes, before any run starts: a mistake in the last run
  // must not surface after the first one trained for an hour, nor leave a results folder.
  std::vector<DataShape> shapes;
  for (const Config& config : configs) {
    naming_the_run(config, data_shape(config.data), available, [&] {
      const RunPlan plan = plan_run(config, data_for(config));
      shapes.push_back(data_shape(data_for(config)));
      check_memory(config, shapes.back(), available);
      if (!config.checkpoint.resume.empty()) {
        prepare_checkpoints(config, plan.widths, plan.steps, "", -1);
      }
    });
  }

  const fs::path dir = fresh_results_folder(root.string(), preset.name);
  point_latest_at(root.string(), dir.string());
  PresetOutcome outcome{dir.string(), {}};
  std::cerr << "gradsync: " << provenance_line() << "\n";  // what produced these results

  for (std::size_t i = 0; i < configs.size(); ++i) {
    const Config& config = configs[i];
    std::cerr << "gradsync: run " << config.name << " (" << config.strategy << ", "
              << config.workers << " worker" << (config.workers == 1 ? "" : "s") << ", batch "
              << config.train.batch << " per worker)\n";
    const std::string run_dir = (dir / config.name).string();
    try {
      outcome.runs.push_back(naming_the_run(config, shapes[i], available, [&] {
        if (!runs_as_processes(config)) return run_experiment(config, data_for(config), run_dir);
        // The worker processes load their own copy: this one's memory goes back meanwhile.
        cached = TrainTest{};
        cached_for.reset();
        return run_multi_process(config, run_dir, max_restarts);
      }));
    } catch (const Interrupted&) {
      throw;  // the user stopped it: its own line says what was kept
    } catch (const std::exception&) {
      // Before the failure's own line, which stays the last: what of this run can be used.
      std::cerr << "gradsync: run " << config.name << " failed; " << kept_results(config, run_dir)
                << "\n";
      throw;
    }
    report(outcome.runs.back());
  }
  std::vector<RunSummary> summaries;
  for (const RunOutcome& run : outcome.runs) summaries.push_back(run.summary);
  write_text(dir / "comparison.md", comparison_table(summaries));
  return outcome;
}

}  // namespace gradsync
