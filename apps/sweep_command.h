// `gradsync sweep PRESET`: the preset's runs at every worker count of sweep.workers, then
// sweep.csv and sweep.md in the results folder.
//
//   const Command sweep = add_sweep_command(app);
//   app.parse(argc, argv);
//   if (sweep.app->parsed()) return sweep.run();   // blocks until the whole grid has run
//
// run() prints the sweep's table and the results folder to stdout; errors are thrown for main.
#pragma once

#include <CLI/CLI.hpp>

#include "apps/command.h"

namespace gradsync {

Command add_sweep_command(CLI::App& parent);

}  // namespace gradsync
