// The mpirun command line that starts N ranks of one program, for runs whose backend needs an
// MPI launcher (comm.backend: mpi): MPI_Init takes its rank from the launcher, so `gradsync
// run` cannot start such ranks itself the way it starts the others.
//
//   auto argv = mpirun_command({.ranks = 4, .exported = {{"MASTER_ADDR", "127.0.0.1"}}},
//                              {exe, "worker", "--config", path});
//   // mpirun --oversubscribe --bind-to none -np 4 --mca btl self,tcp -x MASTER_ADDR ...
//
// Open MPI's mpirun is what is built for (Debian's openmpi-bin): -x exports a variable of the
// launcher's environment to every rank (set it in the environment mpirun is started with), and
// as root mpirun refuses to start without --allow-run-as-root, so it is added when euid is 0.
// Pure but for the lookups of mpirun on PATH and of the effective user.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace gradsync {

struct MpirunOptions {
  int ranks = 1;
  std::vector<std::pair<std::string, std::string>> exported;  // name, value: passed with -x
  // Open MPI's transports between the ranks: self,tcp by default, so that ranks talk over
  // loopback sockets as gradsync's own backends do (shared memory is another comparison).
  std::string btl = "self,tcp";
  bool as_root = false;  // adds --allow-run-as-root
};

// mpirun's path from PATH, or a ConfigError naming comm.backend and Debian's openmpi-bin.
std::string find_mpirun();

// argv for mpirun (argv[0] = `mpirun`, the path find_mpirun found) running `program`.
std::vector<std::string> mpirun_command(const std::string& mpirun, const MpirunOptions& options,
                                        const std::vector<std::string>& program);

// The command as one line a user can paste into a shell (arguments quoted where needed).
std::string shell_line(const std::vector<std::string>& argv);

}  // namespace gradsync
