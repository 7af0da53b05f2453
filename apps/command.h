// What every `gradsync` subcommand file shares: the Command each add_X_command returns, the
// UsageError its run() throws for a mistake CLI11 cannot see while parsing, and how main words a
// usage error (one line naming the `--help` to read, exit 2; docs/errors.md).
//
//   CLI::App app;
//   const std::vector<Command> commands = {add_run_command(app), add_model_command(app)};
//   app.parse(argc, argv);                 // main turns CLI::ParseError into usage_error(...)
//   return run_parsed(commands);           // inside main's try: run() throws
//
// Not thread-safe, and nothing here blocks: the command line is parsed once, on main's thread.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "common/error.h"

namespace gradsync {

// Where `gradsync run quickstart` looks for quickstart.yaml: beside an installed binary,
// <prefix>/share/gradsync/presets (the binary in <prefix>/bin; CMakeLists.txt's install rules);
// else, for a binary in its build tree, the source tree's experiments/presets.
std::string presets_dir();

// One subcommand. Its options live in state that `run` owns, so a Command must outlive parsing.
struct Command {
  CLI::App* app = nullptr;   // the subcommand, owned by the parent CLI::App
  std::function<int()> run;  // after parsing, when app->parsed(): returns the exit code, or throws
};

// A command-line mistake found only after parsing (`gradsync run` with no preset): main reports
// it as usage_error does, with exit code 2, where any other exception exits 1.
class UsageError : public Error {
 public:
  using Error::Error;
};

// Runs whichever of `commands` the command line chose; 0 when none was.
int run_parsed(const std::vector<Command>& commands);

// CLI11's complaint as gradsync words it: `gradsync nope` names the word that is not a command.
std::string parse_error_message(const CLI::App& root, const CLI::ParseError& error);

// Prints "gradsync: error: WHAT (`gradsync bench ps --help` lists the options)" to stderr, the
// path being as deep as the command line reached; returns 2, the exit code of a usage error.
int usage_error(const CLI::App& root, const std::string& what);

}  // namespace gradsync
