// gradsync: one executable, one subcommand per job, each in its own apps/X_command.cpp that parses
// its options and hands over to the folders below. This is the only place that catches
// exceptions: one line to stderr, exit code 1 (2 for command-line usage errors, 128 + the signal
// for an interrupted run).
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <vector>

#include "apps/bench_command.h"
#include "apps/command.h"
#include "apps/model_command.h"
#include "apps/run_command.h"
#include "apps/server_command.h"
#include "apps/sweep_command.h"
#include "apps/teach_command.h"
#include "apps/worker_command.h"
#include "common/build_info.h"
#include "common/error.h"
#include "common/failure_note.h"
#include "common/malloc_policy.h"
#include "model/kernels/cpu_kernels.h"

int main(int argc, char** argv) {
  // Before any thread starts: ZeroMQ's receive buffers reuse freed pages (malloc_policy.h).
  gradsync::keep_freed_memory_mapped();
  CLI::App app{
      "gradsync: one model, several gradient-synchronisation strategies, measured "
      "side by side"};
  app.require_subcommand(1);
  app.set_version_flag("--version", gradsync::version_line());
  gradsync::set_command_line(argc, argv);
  // In the order `gradsync --help` lists them (a braced list is evaluated left to right).
  const std::vector<gradsync::Command> commands = {
      gradsync::add_run_command(app),    gradsync::add_sweep_command(app),
      gradsync::add_worker_command(app), gradsync::add_server_command(app),
      gradsync::add_bench_command(app),  gradsync::add_model_command(app),
      gradsync::add_teach_command(app)};

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help is not an error: CLI11 prints the help and exits 0.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    return gradsync::usage_error(app, gradsync::parse_error_message(app, e));
  }

  try {
    gradsync::check_kernel_environment();  // a bad GRADSYNC_KERNELS fails here, not mid-run
    return gradsync::run_parsed(commands);
  } catch (const gradsync::UsageError& e) {
    return gradsync::usage_error(app, e.what());
  } catch (const gradsync::Interrupted& e) {
    std::cerr << "gradsync: error: " << e.what() << "\n";
    return 128 + e.signal();  // as a shell reports a command the signal ended
  } catch (const std::exception& e) {
    gradsync::note_failure(e.what());  // for the launcher: when this process failed, and why
    std::cerr << "gradsync: error: " << e.what() << "\n";
    return 1;
  }
}
