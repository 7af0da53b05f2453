#include "launch/mpirun_command.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "common/error.h"

namespace gradsync {

const std::vector<std::string>& variables_mpirun_ranks_must_not_inherit() {
  static const std::vector<std::string> names = {"RANK", "WORLD_SIZE", "LOCAL_RANK",
                                                 "LOCAL_WORLD_SIZE", "GROUP_RANK"};
  return names;
}

namespace {

std::string on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path != nullptr ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    const std::filesystem::path candidate = std::filesystem::path(dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "";
}

// The first line `mpirun --version` prints ("mpirun (Open MPI) 4.1.4"), or "" if it fails.
std::string version_line(const std::string& mpirun) {
  const std::string command = "'" + mpirun + "' --version 2>/dev/null";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return "";
  char line[256] = {};
  const bool read = std::fgets(line, sizeof line, pipe) != nullptr;
  ::pclose(pipe);
  std::string text = read ? line : "";
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

}  // namespace

std::string find_mpirun() {
  for (const char* name : {"mpirun.openmpi", "mpirun"}) {
    const std::string found = on_path(name);
    if (found.empty()) continue;
    const std::string version = version_line(found);
    // Open MPI 4 says "mpirun (Open MPI) 4.1.4", or "(OpenRTE)" under mpirun.openmpi's name.
    if (version.find("Open MPI") == std::string::npos &&
        version.find("OpenRTE") == std::string::npos) {
      throw ConfigError("comm", "comm.backend",
                        "mpi: " + found + " is not Open MPI's mpirun (it says '" + version +
                            "'), and gradsync's mpi backend is built with Open MPI (install "
                            "Debian's openmpi-bin, or put its mpirun first on PATH)");
    }
    return found;
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
  if (options.this_host_only) {
    argv.insert(argv.end(), {"--host", "localhost:" + std::to_string(options.ranks)});
  }
  if (!options.btl.empty()) {
    argv.insert(argv.end(), {"--mca", "btl", options.btl});
    if (options.this_host_only && options.btl.find("tcp") != std::string::npos) {
      argv.insert(argv.end(), {"--mca", "btl_tcp_if_include", "lo"});
    }
  }
  for (const auto& [name, value] : options.exported) {
    argv.insert(argv.end(), {"-x", name + "=" + value});
  }
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
