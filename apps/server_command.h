// `gradsync server`: one parameter-server shard, started by `gradsync run` or by hand on another
// machine; `--gen-keys FILE` writes a CURVE key pair instead.
//
//   const Command server = add_server_command(app);
//   app.parse(argc, argv);
//   if (server.app->parsed()) return server.run();   // blocks until every worker said goodbye
//
// run() throws UsageError without --config and --run-dir (and no --gen-keys), and
// gradsync::Error for anything that fails while serving, for main to report.
#pragma once

#include <CLI/CLI.hpp>

#include "apps/command.h"

namespace gradsync {

Command add_server_command(CLI::App& parent);

}  // namespace gradsync
