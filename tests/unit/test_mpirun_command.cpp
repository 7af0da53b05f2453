// The mpirun command `gradsync run` starts comm.backend: mpi runs with.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "launch/mpirun_command.h"

namespace {

using Argv = std::vector<std::string>;

// Sets PATH for one scope.
class ScopedPath {
 public:
  explicit ScopedPath(const std::string& value) {
    const char* old = std::getenv("PATH");
    had_ = old != nullptr;
    if (had_) old_ = old;
    ::setenv("PATH", value.c_str(), 1);
  }
  ~ScopedPath() {
    if (had_) {
      ::setenv("PATH", old_.c_str(), 1);
    } else {
      ::unsetenv("PATH");
    }
  }

 private:
  bool had_ = false;
  std::string old_;
};

}  // namespace

TEST_CASE("mpirun command: ranks on this host, TCP over lo, variables, then the program") {
  gradsync::MpirunOptions options;
  options.ranks = 4;
  options.exported = {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
  const Argv argv = gradsync::mpirun_command("/usr/bin/mpirun", options, {"/x/gradsync", "worker"});
  CHECK(argv == Argv{"/usr/bin/mpirun", "--oversubscribe", "--bind-to", "none", "-np", "4",
                     "--host", "localhost:4", "--mca", "btl", "self,tcp", "--mca",
                     "btl_tcp_if_include", "lo", "-x", "MASTER_ADDR=127.0.0.1", "-x",
                     "MASTER_PORT=29500", "/x/gradsync", "worker"});
  // Open MPI's own choice of transports and hosts, as root.
  options.as_root = true;
  options.btl.clear();
  options.this_host_only = false;
  options.exported.resize(1);
  CHECK(gradsync::mpirun_command("mpirun", options, {"p"}) ==
        Argv{"mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "4",
             "-x", "MASTER_ADDR=127.0.0.1", "p"});
  options.ranks = 0;
  CHECK_THROWS_AS(gradsync::mpirun_command("mpirun", options, {"p"}), gradsync::Error);
}

TEST_CASE("mpirun command: torchrun's variables are the ones kept from the ranks") {
  const std::vector<std::string>& names = gradsync::variables_mpirun_ranks_must_not_inherit();
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}) {
    CHECK(std::find(names.begin(), names.end(), name) != names.end());
  }
}

TEST_CASE("mpirun command: the shell line quotes what a shell would split or expand") {
  CHECK(gradsync::shell_line({"mpirun", "-np", "2", "/a b/gradsync", "it's", "$HOME", ""}) ==
        "mpirun -np 2 '/a b/gradsync' 'it'\\''s' '$HOME' ''");
}

TEST_CASE("mpirun command: Open MPI's found on PATH, else one line naming the package") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("gradsync-mpirun-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "bin");
  const auto fake = [&](const char* name, const char* says) {
    std::ofstream(dir / "bin" / name) << "#!/bin/sh\necho '" << says << "'\n";
    std::filesystem::permissions(dir / "bin" / name, std::filesystem::perms::owner_all);
  };
  {
    ScopedPath path((dir / "empty").string() + ":" + (dir / "bin").string());
    CHECK_THROWS_WITH(gradsync::find_mpirun(),
                      doctest::Contains("comm.backend: mpi: no mpirun on PATH"));
    fake("mpirun", "HYDRA build details:");
    CHECK_THROWS_WITH(gradsync::find_mpirun(), doctest::Contains("is not Open MPI's mpirun"));
    fake("mpirun", "mpirun (Open MPI) 4.1.4");
    CHECK(gradsync::find_mpirun() == (dir / "bin" / "mpirun").string());
    // Debian's own name wins over whatever the mpirun alternative points at.
    fake("mpirun.openmpi", "mpirun.openmpi (OpenRTE) 4.1.4");
    CHECK(gradsync::find_mpirun() == (dir / "bin" / "mpirun.openmpi").string());
  }
  std::filesystem::remove_all(dir);
}
