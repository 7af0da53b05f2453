// `gradsync run PRESET`: every run of a preset in turn, then a table comparing them; `--keys`
// lists the preset keys instead.
//
//   const Command run = add_run_command(app);
//   app.parse(argc, argv);
//   if (run.app->parsed()) return run.run();   // blocks until every run has finished
//
// run() prints the comparison and the results folder to stdout; it throws UsageError when no
// preset is named, and gradsync::Error (ConfigError, PeerError, Interrupted, ...) for main.
#pragma once

#include <CLI/CLI.hpp>

#include "apps/command.h"

namespace gradsync {

Command add_run_command(CLI::App& parent);

}  // namespace gradsync
