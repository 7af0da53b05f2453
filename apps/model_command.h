// `gradsync model`: the alpha-beta cost model of experiments/cost_model.h as a table (one row
// per worker count: communication time and busiest-node bytes per step for dp, ps with K
// shards and the ring), or, with --calibrate RESULTS_DIR, alpha and beta fitted to measured runs
// and each run's prediction beside its measurement.
//
//   ModelCommand model = add_model_command(app);
//   app.parse(argc, argv);
//   if (model.app->parsed()) return model.run();   // inside main's try block: run() throws
//
// run() prints to stdout (notes about skipped runs to stderr) and returns the exit code; it
// throws gradsync::Error (ConfigError for a bad value, DataError for an unreadable results
// folder) for main to report.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace gradsync {

struct ModelCommand {
  CLI::App* app = nullptr;   // the subcommand, owned by the parent app
  std::function<int()> run;  // holds its own copy of the options; call after parse
};

ModelCommand add_model_command(CLI::App& parent);

}  // namespace gradsync
