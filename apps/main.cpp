// gradsync: one executable, one subcommand per job. Thin: parses the command line and hands
// over to experiments/. This is the only place that catches exceptions: one line to stderr,
// exit code 1 (2 for command-line usage errors).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <limits>

#include "apps/model_command.h"
#include "apps/size_options.h"
#include "apps/teach_command.h"
#include "common/error.h"
#include "common/malloc_policy.h"
#include "bench/collective_bench.h"
#include "bench/mlp_throughput.h"
#include "bench/ps_bench.h"
#include "experiments/preset.h"
#include "experiments/run_experiment.h"
#include "worker/server_process.h"
#include "experiments/sweep.h"
#include "worker/worker_process.h"
#include "strategies/ps/ps_client.h"

namespace {

constexpr const char* kPresetsDir = GRADSYNC_SOURCE_DIR "/experiments/presets";

// "gradsync bench ps": the deepest subcommand the command line reached, for the help hint.
std::string command_path(const CLI::App& app) {
  std::string path = "gradsync";
  for (const CLI::App* at = &app; !at->get_subcommands().empty();) {
    at = at->get_subcommands().front();
    path += " " + at->get_name();
  }
  return path;
}

// "run, sweep, worker, ...": what `gradsync` itself accepts first.
std::string subcommand_names(const CLI::App& app) {
  std::string names;
  for (const CLI::App* sub : app.get_subcommands({})) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  return names;
}

// A command-line mistake: one line, exit 2 (a failure while running exits 1).
int usage_error(const CLI::App& app, const std::string& what) {
  std::cerr << "gradsync: error: " << what << " (`" << command_path(app)
            << " --help` lists the options)\n";
  return 2;
}

int run_command(const std::string& preset_arg, const std::vector<std::string>& overrides,
                const std::string& output_dir, const std::vector<std::string>& only) {
  const std::string path = gradsync::find_preset(preset_arg, kPresetsDir);
  gradsync::Preset preset = gradsync::load_preset(path, overrides);
  if (!only.empty()) {
    std::erase_if(preset.runs, [&](const gradsync::Config& c) {
      return std::find(only.begin(), only.end(), c.name) == only.end();
    });
    if (preset.runs.empty()) {
      throw gradsync::ConfigError(path, "--only", "no run of the preset has that name");
    }
  }
  const gradsync::PresetOutcome outcome = gradsync::run_preset(preset, output_dir);
  std::vector<gradsync::RunSummary> summaries;
  for (const auto& run : outcome.runs) summaries.push_back(run.summary);
  std::cout << "\n"
            << gradsync::comparison_table(summaries) << "\nresults: " << outcome.dir << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Before any thread starts: ZeroMQ's receive buffers reuse freed pages (malloc_policy.h).
  gradsync::keep_freed_memory_mapped();
  CLI::App app{
      "gradsync: one model, several gradient-synchronisation strategies, measured "
      "side by side"};
  app.require_subcommand(1);

  std::string preset;
  std::vector<std::string> overrides;
  std::vector<std::string> only;
  std::string output_dir;
  bool list_keys = false;
  CLI::App* run = app.add_subcommand("run", "run a preset: every run in it, then a comparison");
  run->add_option("preset", preset, "preset name (experiments/presets/NAME.yaml) or YAML path");
  run->add_option("--set", overrides, "override a key for every run: --set train.lr=0.1");
  run->add_option("--only", only, "run only the named runs of the preset");
  run->add_option("--output", output_dir, "results root (default: output.dir of the preset)");
  run->add_flag("--keys", list_keys, "list every preset key with its default and meaning");
  std::string resume;
  run->add_option("--resume", resume,
                  "continue from a checkpoint: a step-N folder, a checkpoints folder (its newest "
                  "complete step), a run's or a preset's results folder");

  std::string sweep_preset;
  std::vector<std::string> sweep_overrides;
  std::string sweep_output;
  CLI::App* sweep = app.add_subcommand(
      "sweep", "run a preset's runs at every N of sweep.workers; write sweep.csv and sweep.md");
  sweep->add_option("preset", sweep_preset, "preset name or YAML path")->required();
  sweep->add_option("--set", sweep_overrides, "override a key: --set sweep.workers=[1,2,4]");
  sweep->add_option("--output", sweep_output, "results root (default: output.dir of the preset)");

  std::string worker_config;
  std::string worker_run_dir;
  CLI::App* worker = app.add_subcommand(
      "worker", "one rank of a multi-process run (started by `run`, mpirun, srun or torchrun)");
  worker->add_option("--config", worker_config, "the run's resolved config.yaml")->required();
  worker->add_option("--run-dir", worker_run_dir, "the run's results folder")->required();
  std::vector<std::string> ps_endpoints;
  worker->add_option("--ps-endpoints", ps_endpoints, "ps: the shards, tcp://HOST:PORT each")
      ->delimiter(',');

  std::string server_config;
  std::string server_run_dir;
  std::string key_file;
  int shard = 0;
  int shard_port = 0;
  CLI::App* server = app.add_subcommand(
      "server", "one parameter-server shard (started by `run`, or by hand on another machine)");
  server->add_option("--config", server_config, "the run's resolved config.yaml");
  server->add_option("--run-dir", server_run_dir, "the run's results folder");
  server->add_option("--shard", shard, "which of ps.servers key ranges to serve")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()));
  server->add_option("--port", shard_port, "port on ps.bind (0: any free port, printed)")
      ->check(CLI::Range(0, 65535));
  std::string shard_bind;
  server->add_option("--bind", shard_bind,
                     "the address to listen on (default ps.bind, itself 127.0.0.1)");
  server->add_option("--gen-keys", key_file,
                     "write a new CURVE key pair to this file for ps.curve_keys, and exit");

  gradsync::MlpBenchOptions bench_options;
  CLI::App* bench = app.add_subcommand("bench", "benchmarks");
  bench->require_subcommand(1);
  CLI::App* bench_mlp =
      bench->add_subcommand("mlp", "training throughput of the MLP (CPU: one thread; or one GPU)");
  bench_mlp->add_option("--hidden", bench_options.hidden, "hidden widths")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 20));
  bench_mlp->add_option("--batch", bench_options.batch, "batch size")
      ->check(CLI::Range(1, 1 << 20));
  bench_mlp->add_option("--seconds", bench_options.seconds, "timed seconds")
      ->check(CLI::Range(0.001, 86400.0));
  bench_mlp->add_option("--warmup-steps", bench_options.warmup_steps, "untimed steps first")
      ->check(CLI::Range(0, 1 << 30));
  bench_mlp->add_flag("--json", bench_options.json, "print one JSON object");
  bench_mlp->add_option("--device", bench_options.device, "cpu, or gpu (the CUDA MLP)")
      ->check(CLI::IsMember({"cpu", "gpu"}))
      ->capture_default_str();
  bench_mlp->add_option("--gpu", bench_options.gpu, "CUDA device ordinal with --device gpu")
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();

  gradsync::CollectiveBenchOptions collective_options;
  std::string min_size = "4K";
  std::string max_size = "64M";
  double collective_timeout_s = 60;
  CLI::App* bench_allreduce = bench->add_subcommand(
      "allreduce",
      "collective bandwidth of TcpRing (and Gloo) on loopback, or of NCCL on GPUs, as nccl-tests");
  bench_allreduce->add_option("-b,--minbytes", min_size, "smallest size: 512, 4K, 64M, 1G")
      ->check(gradsync::byte_size(sizeof(float)))
      ->capture_default_str();
  bench_allreduce->add_option("-e,--maxbytes", max_size, "largest size")
      ->check(gradsync::byte_size(sizeof(float)))
      ->capture_default_str();
  bench_allreduce
      ->add_option("-f,--stepfactor", collective_options.factor,
                   "each size is the previous one times this")
      ->check(CLI::Range(2, 1 << 20))
      ->capture_default_str();
  bench_allreduce
      ->add_option("-n,--ranks", collective_options.ranks, "ranks, run as threads of this process")
      ->check(CLI::Range(1, gradsync::kMaxRanks))
      ->capture_default_str();
  bench_allreduce->add_option("--op", collective_options.op, "collective to measure")
      ->check(CLI::IsMember({"allreduce", "broadcast", "allgather"}))
      ->capture_default_str();
  bench_allreduce
      ->add_option("-w,--warmup", collective_options.warmup, "untimed iterations per size")
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();
  bench_allreduce
      ->add_option("--iters", collective_options.iters,
                   "timed iterations per size (0: enough for about 0.3 s)")
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();
  bench_allreduce->add_option("--timeout-s", collective_timeout_s, "deadline of every wait")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  bench_allreduce->add_flag("--json", collective_options.json, "one JSON object per size");
  bench_allreduce->add_flag("!--no-gloo", collective_options.gloo, "leave out Gloo's columns");
  bench_allreduce
      ->add_option("--device", collective_options.device,
                   "cpu (TcpRing), or gpu (NCCL, one rank per GPU; --ranks default: "
                   "every visible GPU)")
      ->check(CLI::IsMember({"cpu", "gpu"}))
      ->capture_default_str();

  gradsync::PsBenchOptions ps_bench_options;
  std::vector<std::string> ps_bench_sizes = {"1M", "16M"};
  CLI::App* bench_ps = bench->add_subcommand(
      "ps", "parameter-server push+pull round trip against raw ZeroMQ on loopback, paired");
  bench_ps->add_option("--floats", ps_bench_sizes, "payload sizes in floats: 1M, 16M, 4096")
      ->delimiter(',')
      ->check(gradsync::float_count(gradsync::kPsBenchMaxFloats))
      ->capture_default_str();
  bench_ps->add_option("--shards", ps_bench_options.shards, "parameter-server shards (K)")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  bench_ps
      ->add_option("--rounds", ps_bench_options.rounds,
                   "paired rounds per size (the ratio is their median)")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  bench_ps
      ->add_option("--round-seconds", ps_bench_options.round_seconds,
                   "each side's share of one round (at least 5 round trips)")
      ->check(CLI::Range(0.001, 3600.0))
      ->capture_default_str();
  bench_ps->add_flag("--json", ps_bench_options.json, "one JSON object per size");

  const gradsync::ModelCommand model = gradsync::add_model_command(app);
  const gradsync::TeachCommand teach = gradsync::add_teach_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help is not an error: CLI11 prints the help and exits 0.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    // "A subcommand is required" for `gradsync nope` or `gradsync --bogus`: name the word.
    const std::vector<std::string> left = app.remaining();
    if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr && !left.empty()) {
      return usage_error(app, "'" + left.front() + "' is not a command (" + subcommand_names(app) +
                                  ") or an option of this one");
    }
    return usage_error(app, e.what());
  }

  try {
    if (run->parsed()) {
      if (list_keys) {
        std::cout << gradsync::describe_keys();
        return 0;
      }
      if (preset.empty()) {
        return usage_error(app, "name a preset, e.g. `gradsync run quickstart`");
      }
      // --resume is checkpoint.resume for every run; each run finds its own checkpoint in it.
      if (!resume.empty()) overrides.push_back("checkpoint.resume=" + resume);
      return run_command(preset, overrides, output_dir, only);
    }
    if (sweep->parsed()) {
      const gradsync::Preset loaded =
          gradsync::load_preset(gradsync::find_preset(sweep_preset, kPresetsDir), sweep_overrides);
      const gradsync::SweepOutcome outcome = gradsync::run_sweep(loaded, sweep_output);
      std::cout << "\n"
                << gradsync::sweep_markdown(outcome.rows) << "\nresults: " << outcome.dir
                << "  (sweep.csv, sweep.md; plot with plots/plot_results.py)\n";
      return 0;
    }
    if (worker->parsed()) {
      gradsync::run_worker_process(gradsync::load_run_config(worker_config), worker_config,
                                   worker_run_dir, ps_endpoints);
      return 0;
    }
    if (server->parsed()) {
      if (!key_file.empty()) {
        gradsync::write_curve_keys(key_file, gradsync::generate_curve_keys());
        std::cout << "wrote a CURVE key pair to " << key_file << "\n";
        return 0;
      }
      if (server_config.empty() || server_run_dir.empty()) {
        return usage_error(app, "--config and --run-dir are required (or --gen-keys FILE)");
      }
      gradsync::run_server_process(gradsync::load_run_config(server_config), server_run_dir,
                                   shard, shard_port, shard_bind);
      return 0;
    }
    if (bench_allreduce->parsed()) {
      collective_options.min_bytes = gradsync::parse_size(min_size);
      collective_options.max_bytes = gradsync::parse_size(max_size);
      if (collective_options.max_bytes < collective_options.min_bytes) {
        return usage_error(app,
                           "--maxbytes: " + max_size + " is smaller than --minbytes " + min_size);
      }
      collective_options.timeout =
          std::chrono::milliseconds(static_cast<long long>(collective_timeout_s * 1000));
      // On GPUs the natural default is one rank per visible GPU, not the CPU default of 2.
      if (collective_options.device == "gpu" && bench_allreduce->count("--ranks") == 0) {
        collective_options.ranks = 0;
      }
      const gradsync::CollectiveBenchReport report =
          gradsync::run_collective_bench_report(collective_options);
      std::cout << report.text;
      if (report.wrong != 0 || report.gloo_wrong != 0) {
        std::cerr << "gradsync: error: bench allreduce: " << report.wrong
                  << " wrong elements from gradsync's collective, " << report.gloo_wrong
                  << " from Gloo's (#wrong columns above)\n";
        return 1;
      }
      return 0;
    }
    if (bench_ps->parsed()) {
      ps_bench_options.floats.clear();
      for (const std::string& size : ps_bench_sizes) {
        ps_bench_options.floats.push_back(gradsync::parse_size(size));  // checked: float_count
      }
      const auto rows = gradsync::run_ps_bench_rows(ps_bench_options);
      std::cout << gradsync::render_ps_bench(ps_bench_options, rows);
      for (const gradsync::PsBenchRow& row : rows) {
        if (row.wrong != 0) {
          std::cerr << "gradsync: error: bench ps: " << row.wrong << " of " << row.floats
                    << " parameters differ from a local replay of the steps\n";
          return 1;
        }
      }
      return 0;
    }
    if (model.app->parsed()) return model.run();
    if (teach.app->parsed()) return teach.run();
    if (bench_mlp->parsed()) {
      std::cout << gradsync::run_mlp_bench(bench_options) << "\n";
      return 0;
    }
  } catch (const gradsync::Interrupted& e) {
    std::cerr << "gradsync: error: " << e.what() << "\n";
    return 128 + e.signal();  // as a shell reports a command the signal ended
  } catch (const std::exception& e) {
    std::cerr << "gradsync: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
