#include "apps/server_command.h"

#include <iostream>
#include <limits>
#include <memory>
#include <string>

#include "experiments/preset.h"
#include "common/run_id.h"
#include "server/curve_keys.h"
#include "worker/server_process.h"

namespace gradsync {

Command add_server_command(CLI::App& parent) {
  struct Options {
    std::string config;
    std::string run_dir;
    std::string key_file;
    int shard = 0;
    int port = 0;
    std::string bind;
  };
  auto options = std::make_shared<Options>();
  CLI::App* server = parent.add_subcommand(
      "server", "one parameter-server shard (started by `run`, or by hand on another machine)");
  server->add_option("--config", options->config, "the run's resolved config.yaml");
  server->add_option("--run-dir", options->run_dir, "the run's results folder");
  server->add_option("--shard", options->shard, "which of ps.servers key ranges to serve")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()));
  server->add_option("--port", options->port, "port on ps.bind (0: any free port, printed)")
      ->check(CLI::Range(0, 65535));
  server->add_option("--bind", options->bind,
                     "the address to listen on (default ps.bind, itself 127.0.0.1)");
  server->add_option("--gen-keys", options->key_file,
                     "write a new CURVE key pair to this file for ps.curve_keys, and exit");

  return {server, [options] {
            if (!options->key_file.empty()) {
              write_curve_keys(options->key_file, generate_curve_keys());
              std::cout << "wrote a CURVE key pair to " << options->key_file << "\n";
              return 0;
            }
            // Not ->required(): --gen-keys alone is a complete command line.
            if (options->config.empty() || options->run_dir.empty()) {
              throw UsageError("--config and --run-dir are required (or --gen-keys FILE)");
            }
            const Config config = load_run_config(options->config);
            run_server_process(config, options->run_dir, options->shard, options->port,
                               run_id_for(to_yaml(config)), options->bind);
            return 0;
          }};
}

}  // namespace gradsync
