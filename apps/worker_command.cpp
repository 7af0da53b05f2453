#include "apps/worker_command.h"

#include <memory>
#include <string>
#include <vector>

#include "experiments/preset.h"
#include "worker/worker_process.h"

namespace gradsync {

Command add_worker_command(CLI::App& parent) {
  struct Options {
    std::string config;
    std::string run_dir;
    std::vector<std::string> ps_endpoints;
  };
  auto options = std::make_shared<Options>();
  CLI::App* worker = parent.add_subcommand(
      "worker", "one rank of a multi-process run (started by `run`, mpirun, srun or torchrun)");
  worker->add_option("--config", options->config, "the run's resolved config.yaml")->required();
  worker->add_option("--run-dir", options->run_dir, "the run's results folder")->required();
  worker
      ->add_option("--ps-endpoints", options->ps_endpoints, "ps: the shards, tcp://HOST:PORT each")
      ->delimiter(',');

  return {worker, [options] {
            run_worker_process(load_run_config(options->config), options->config, options->run_dir,
                               options->ps_endpoints);
            return 0;
          }};
}

}  // namespace gradsync
