#include "apps/worker_command.h"

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "experiments/preset.h"
#include "launch/rendezvous_env.h"
#include "worker/worker_process.h"

namespace gradsync {
namespace {

struct WorkerOptions {
  std::string preset;  // a name, a YAML path, or a run's config.yaml
  std::string config;  // the same, as the local launcher passes it
  std::vector<std::string> overrides;
  std::vector<std::string> only;
  std::string run_dir;
  std::string resume;
  std::vector<std::string> ps_endpoints;
};

int run_worker(const WorkerOptions& o) {
  if (o.preset.empty() == o.config.empty()) {
    throw UsageError(
        "name a preset or a config.yaml, e.g. `gradsync worker quickstart --only "
        "allreduce-4` (or --config FILE)");
  }
  const std::string& given = o.preset.empty() ? o.config : o.preset;
  std::vector<std::string> overrides = o.overrides;
  // --resume PATH is checkpoint.resume, as for `gradsync run`; auto is a restart (below).
  const bool restart = o.resume == "auto";
  if (!o.resume.empty() && !restart) overrides.push_back("checkpoint.resume=" + o.resume);
  PresetRun run = resolve_one_run(given, presets_dir(), overrides, o.only);
  check_mpi_launcher(run.config, given);  // before the launcher's world size is read
  // The launcher decides how many ranks there are; a preset names its own count only for
  // `gradsync run`. Said once, by rank 0.
  const RendezvousEnv env = read_rendezvous_env();
  // ps without --ps-endpoints: the launch's last ps.servers ranks are its shards.
  const bool ps_roles = run.config.strategy == "ps" && o.ps_endpoints.empty();
  const int workers = ps_roles ? ps_workers(run.config, env.world_size) : env.world_size;
  if (run.config.workers != workers) {
    if (env.rank == 0) {
      std::cerr << "gradsync: worker: " << run.config.name
                << " says workers = " << run.config.workers << ", but " << env.source << " started "
                << env.world_size << " rank(s)"
                << (ps_roles ? " with ps.servers = " + std::to_string(run.config.ps.servers) : "")
                << ": running " << workers << " worker(s)\n";
    }
    run.config.workers = workers;
  }
  WorkerProcessOptions options;
  options.config_path = run.path;
  options.run_dir = o.run_dir;
  options.preset_name = run.preset_name;
  options.config_yaml = to_yaml(run.config);
  options.ps_endpoints = o.ps_endpoints;
  options.restart = restart;
  run_worker_process(run.config, options);
  return 0;
}

}  // namespace

Command add_worker_command(CLI::App& parent) {
  auto options = std::make_shared<WorkerOptions>();
  CLI::App* worker = parent.add_subcommand(
      "worker", "one rank of a multi-process run (started by `run`, mpirun, srun or torchrun)");
  worker->add_option("preset", options->preset,
                     "preset name (experiments/presets/NAME.yaml), YAML path or a run's "
                     "config.yaml");
  worker->add_option("--config", options->config, "the run's resolved config.yaml");
  worker->add_option("--set", options->overrides, "override a key: --set train.lr=0.1");
  worker->add_option("--only", options->only, "the run of the preset to run, when it has several");
  worker->add_option("--run-dir", options->run_dir,
                     "the run's results folder (default: <output.dir>/<preset>-<time>/<run>, "
                     "made by rank 0)");
  worker->add_option("--resume", options->resume,
                     "auto: go on with the earlier attempt's run folder from its newest checkpoint "
                     "(as after a torchrun restart); or a checkpoint, as for `gradsync run`");
  worker
      ->add_option("--ps-endpoints", options->ps_endpoints, "ps: the shards, tcp://HOST:PORT each")
      ->delimiter(',');
  return {worker, [options] { return run_worker(*options); }};
}

}  // namespace gradsync
