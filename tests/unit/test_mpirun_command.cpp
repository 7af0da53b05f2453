// The mpirun command `gradsync run` starts comm.backend: mpi runs with.
#include <doctest/doctest.h>

#include <unistd.h>

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

TEST_CASE("mpirun command: ranks, transports, exported variables, then the program") {
  gradsync::MpirunOptions options;
  options.ranks = 4;
  options.exported = {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
  const Argv argv = gradsync::mpirun_command("/usr/bin/mpirun", options, {"/x/gradsync", "worker"});
  CHECK(argv == Argv{"/usr/bin/mpirun", "--oversubscribe", "--bind-to", "none", "-np", "4", "--mca", "btl", "self,tcp",
                     "-x", "MASTER_ADDR", "-x", "MASTER_PORT", "/x/gradsync", "worker"});
  options.as_root = true;
  options.btl.clear();  // Open MPI's own choice
  CHECK(gradsync::mpirun_command("mpirun", options, {"p"}) ==
        Argv{"mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "4",
             "-x", "MASTER_ADDR", "-x", "MASTER_PORT", "p"});
  options.ranks = 0;
  CHECK_THROWS_AS(gradsync::mpirun_command("mpirun", options, {"p"}), gradsync::Error);
}

TEST_CASE("mpirun command: the shell line quotes what a shell would split or expand") {
  CHECK(gradsync::shell_line({"mpirun", "-np", "2", "/a b/gradsync", "it's", "$HOME", ""}) ==
        "mpirun -np 2 '/a b/gradsync' 'it'\\''s' '$HOME' ''");
}

TEST_CASE("mpirun command: found on PATH, or one line naming the package") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("gradsync-mpirun-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "bin");
  {
    ScopedPath path((dir / "empty").string() + ":" + (dir / "bin").string());
    CHECK_THROWS_WITH(gradsync::find_mpirun(),
                      doctest::Contains("comm.backend: mpi: no mpirun on PATH"));
    std::ofstream(dir / "bin" / "mpirun") << "#!/bin/sh\n";
    std::filesystem::permissions(dir / "bin" / "mpirun", std::filesystem::perms::owner_all);
    CHECK(gradsync::find_mpirun() == (dir / "bin" / "mpirun").string());
  }
  std::filesystem::remove_all(dir);
}
