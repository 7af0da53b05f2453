// `gradsync teach ...`: step-by-step demos that print how a strategy moves data. One group
// subcommand, one sub-subcommand per lesson (`teach ring`, ...).
//
//   CLI::App app;
//   const Command teach = add_teach_command(app);
//   app.parse(argc, argv);
//   if (teach.app->parsed()) return teach.run();   // runs whichever lesson was parsed
//
// The options live in state owned by `run`, so the Command must outlive parsing. `run`
// writes to stdout and returns the exit code; errors are thrown, for main to report.
#pragma once

#include <CLI/CLI.hpp>

#include "apps/command.h"

namespace gradsync {

// The `teach` group; its run() runs the lesson that was chosen.
Command add_teach_command(CLI::App& parent);

}  // namespace gradsync
