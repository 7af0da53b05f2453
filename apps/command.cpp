#include "apps/command.h"

#include <filesystem>
#include <iostream>

namespace gradsync {

std::string presets_dir() {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (!error) {
    // GRADSYNC_INSTALLED_PRESETS: "../share/gradsync/presets" in the default layout.
    const fs::path installed = (self.parent_path() / GRADSYNC_INSTALLED_PRESETS).lexically_normal();
    if (fs::is_directory(installed, error)) return installed.string();
  }
  return GRADSYNC_SOURCE_DIR "/experiments/presets";
}

namespace {

// "gradsync bench ps": the deepest subcommand the command line reached, for the help hint.
std::string command_path(const CLI::App& root) {
  std::string path = "gradsync";
  for (const CLI::App* at = &root; !at->get_subcommands().empty();) {
    at = at->get_subcommands().front();
    path += " " + at->get_name();
  }
  return path;
}

// "run, sweep, worker, ...": what `gradsync` itself accepts first.
std::string subcommand_names(const CLI::App& root) {
  std::string names;
  for (const CLI::App* sub : root.get_subcommands({})) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  return names;
}

}  // namespace

int run_parsed(const std::vector<Command>& commands) {
  for (const Command& command : commands) {
    if (command.app->parsed()) return command.run();
  }
  return 0;  // only without require_subcommand: parsing fails first otherwise
}

std::string parse_error_message(const CLI::App& root, const CLI::ParseError& error) {
  // "A subcommand is required" for `gradsync nope` or `gradsync --bogus`: name the word.
  const std::vector<std::string> left = root.remaining();
  if (dynamic_cast<const CLI::RequiredError*>(&error) != nullptr && !left.empty()) {
    return "'" + left.front() + "' is not a command (" + subcommand_names(root) +
           ") or an option of this one";
  }
  return error.what();
}

int usage_error(const CLI::App& root, const std::string& what) {
  std::cerr << "gradsync: error: " << what << " (`" << command_path(root)
            << " --help` lists the options)\n";
  return 2;
}

}  // namespace gradsync
