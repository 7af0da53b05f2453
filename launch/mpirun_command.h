// The mpirun command line that starts N ranks of one program, for runs whose backend needs an
// MPI launcher (comm.backend: mpi): MPI_Init takes its rank from the launcher, so `gradsync
// run` cannot start such ranks itself the way it starts the others.
//
//   auto argv = mpirun_command(find_mpirun(), {.ranks = 4, .exported = {{"MASTER_PORT", "29500"}}},
//                              {exe, "worker", "--config", path});
//   // mpirun --oversubscribe --bind-to none -np 4 --host localhost:4 --mca btl self,tcp
//   //        --mca btl_tcp_if_include lo -x MASTER_PORT=29500 exe worker --config path
//
// Open MPI's mpirun is what is built for (Debian's openmpi-bin): -x NAME=VALUE sets a variable
// for every rank (so the printed line can be run by hand), and as root mpirun refuses to start
// without --allow-run-as-root. mpirun_command is pure; find_mpirun reads PATH and runs mpirun.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace gradsync {

struct MpirunOptions {
  int ranks = 1;
  std::vector<std::pair<std::string, std::string>> exported;  // -x NAME=VALUE to every rank
  // Open MPI's transports between the ranks: self,tcp by default, so that ranks talk over
  // loopback sockets as gradsync's own backends do (shared memory is another comparison).
  // Its TCP transport leaves out 127.0.0.0/8 by default, so the ranks are told to use lo.
  std::string btl = "self,tcp";
  // Every rank on this host (--host localhost:N): inside a Slurm or PBS allocation mpirun
  // would otherwise spread them over its nodes, where the store's 127.0.0.1 is not rank 0's.
  bool this_host_only = true;
  bool as_root = false;  // adds --allow-run-as-root
};

// The variables of other launchers (torchrun's) that launch/rendezvous_env.h would read before
// mpirun's own: a process starting mpirun removes them from mpirun's environment.
const std::vector<std::string>& variables_mpirun_ranks_must_not_inherit();

// Open MPI's mpirun: mpirun.openmpi (Debian's name, whatever the mpirun alternative points
// at), else mpirun, from PATH, checked to be Open MPI's (`--version`): the mpi backend is built
// against Open MPI, and MPICH's mpirun would start N jobs of one rank each. ConfigError naming
// comm.backend and Debian's openmpi-bin otherwise.
std::string find_mpirun();

// argv for mpirun (argv[0] = `mpirun`, the path find_mpirun found) running `program`.
std::vector<std::string> mpirun_command(const std::string& mpirun, const MpirunOptions& options,
                                        const std::vector<std::string>& program);

// The command as one line a user can paste into a shell (arguments quoted where needed).
std::string shell_line(const std::vector<std::string>& argv);

}  // namespace gradsync
