// `gradsync worker`: one rank of a multi-process run, started by `gradsync run` or by an external
// launcher (mpirun, srun, torchrun), which says the rank and world size through the environment.
//
//   const Command worker = add_worker_command(app);
//   app.parse(argc, argv);
//   if (worker.app->parsed()) return worker.run();   // blocks until the rank's run has ended
//
// run() trains this rank and writes its part of the run folder; errors are thrown for main.
#pragma once

#include <CLI/CLI.hpp>

#include "apps/command.h"

namespace gradsync {

Command add_worker_command(CLI::App& parent);

}  // namespace gradsync
