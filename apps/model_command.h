// `gradsync model`: the alpha-beta cost model of experiments/cost_model.h as a table (one row
// per worker count: communication time and busiest-node bytes per step for dp, ps with K
// shards and the ring), or, with --calibrate RESULTS_DIR, alpha and beta fitted to measured runs
// and each run's prediction beside its measurement.
//
//   const Command model = add_model_command(app);
//   app.parse(argc, argv);
//   if (model.app->parsed()) return model.run();   // inside main's try block: run() throws
//
// run() prints to stdout (notes about skipped runs to stderr) and returns the exit code; it
// throws gradsync::Error (ConfigError for a bad value, DataError for an unreadable results
// folder) for main to report.
#pragma once

#include <CLI/CLI.hpp>

#include "apps/command.h"

namespace gradsync {

Command add_model_command(CLI::App& parent);

}  // namespace gradsync
