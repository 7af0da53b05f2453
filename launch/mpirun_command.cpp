#include "launch/mpirun_command.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "common/error.h"

namespace gradsync {

std::string find_mpirun() {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path != nullptr ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    const std::filesystem::path candidate = std::filesystem::path(dir) / "mpirun";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  throw ConfigError("comm", "comm.backend",
                    "mpi: no mpirun on PATH, and MPI ranks can only be started by an MPI "
                    "launcher (install Debian's openmpi-bin)");
}

std::vector<std::string> mpirun_command(const std::string& mpirun, const MpirunOptions& options,
                                        const std::vector<std::string>& program) {
  GRADSYNC_CHECK(options.ranks >= 1, "mpirun_command: ranks must be positive");
  std::vector<std::string> argv = {mpirun};
  if (options.as_root) argv.push_back("--allow-run-as-root");
  // More ranks than cores is how a laptop or CI runs 4 ranks: without it mpirun refuses.
  // --bind-to none: with 2 ranks or fewer Open MPI pins each rank to one core, where its
  // training and communication threads would share it, unlike the other backends' ranks.
  argv.insert(argv.end(),
              {"--oversubscribe", "--bind-to", "none", "-np", std::to_string(options.ranks)});
  if (!options.btl.empty()) argv.insert(argv.end(), {"--mca", "btl", options.btl});
  for (const auto& [name, value] : options.exported) argv.insert(argv.end(), {"-x", name});
  argv.insert(argv.end(), program.begin(), program.end());
  return argv;
}

std::string shell_line(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& arg : argv) {
    if (!line.empty()) line += ' ';
    const bool plain = !arg.empty() && arg.find_first_not_of(
                                           "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                           "0123456789_-./=:,@%+") == std::string::npos;
    if (plain) {
      line += arg;
      continue;
    }
    line += '\'';
    for (const char c : arg) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
    line += '\'';
  }
  return line;
}

}  // namespace gradsync
