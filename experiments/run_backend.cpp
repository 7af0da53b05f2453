#include "experiments/run_backend.h"

#include <unistd.h>

#include <algorithm>
#include <iostream>

#include "allreduce/make_communicator.h"
#include "common/error.h"
#include "common/run_id.h"
#include "launch/inherited_socket.h"
#include "launch/mpirun_command.h"
#include "worker/clock_origin.h"
#include "worker/run_plan.h"

namespace gradsync {

bool starts_under_mpirun(const Config& config) {
  return config.strategy == "allreduce" && config.comm.backend == "mpi";
}

// comm.backend mpi: MPI_Init takes its rank from an MPI launcher, so mpirun starts the ranks;
// each reads its place from mpirun's OMPI_COMM_WORLD_* variables and the store's address from
// MASTER_ADDR / MASTER_PORT. The command is printed without the run's clock origin, so that
// pasted into a shell it starts the ranks as a user's own mpirun would (they then write their
// own summary, as under any outer launcher).
ProcessSpec mpirun_process(const Config& config, const std::vector<std::string>& worker_args,
                           const std::string& master, const std::string& port, long long origin_ns,
                           const std::string& run_id) {
  MpirunOptions options;
  options.ranks = config.workers;
  options.as_root = ::geteuid() == 0;
  options.exported = {{"MASTER_ADDR", master}, {"MASTER_PORT", port}};
  // The launcher holds the port for rank 0 (run_multi_process; mpi never runs in namespaces).
  options.exported.emplace_back(kStorePortHeldEnv, "1");
  const std::string mpirun = find_mpirun();
  std::cerr << "gradsync: run " << config.name << ": "
            << shell_line(mpirun_command(mpirun, options, worker_args)) << "\n";
  options.exported.emplace_back(kOriginEnv, std::to_string(origin_ns));
  options.exported.emplace_back(kRunIdEnv, run_id);
  ProcessSpec spec;
  spec.name = "mpirun";
  spec.argv = mpirun_command(mpirun, options, worker_args);
  // torchrun's names would win over mpirun's in launch/rendezvous_env.h.
  spec.unset = variables_mpirun_ranks_must_not_inherit();
  // The first rank's own error line, else mpirun's report of a rank that died by a signal.
  spec.blame_markers = {"gradsync: error:", "noticed that process rank"};
  return spec;
}

void check_backend_available(const Config& config) {
  if (config.strategy != "allreduce" || config.comm.backend == "auto") return;
  const std::vector<std::string> built = compiled_backends();
  if (std::find(built.begin(), built.end(), config.comm.backend) == built.end()) {
    std::string names;
    for (const std::string& name : built) names += (names.empty() ? "" : ", ") + name;
    const std::string& backend = config.comm.backend;
    throw ConfigError(config.name, "comm.backend",
                      backend + " is not in this gradsync (built with: " + names + ")" +
                          (backend == "gloo"  ? ": install Debian's libgloo-dev and rebuild"
                           : backend == "mpi" ? ": install Debian's libopenmpi-dev and "
                                                "openmpi-bin, and rebuild"
                                              : ": it needs CUDA and NCCL at build time"));
  }
  if (starts_under_mpirun(config)) {
    find_mpirun();  // one line naming the package, before any folder exists
    if (config.network.namespaces) {
      // mpirun starts the ranks itself, so they cannot each be put in a namespace, and
      // without namespaces nothing paces Open MPI's sockets.
      throw ConfigError(config.name, "network.namespaces",
                        "not with comm.backend mpi under gradsync run (mpirun starts the ranks, "
                        "outside the namespaces); link emulation is for tcp and gloo");
    }
  }
}

void check_namespaces_allowed(const Config& config) {
  if (!config.network.namespaces || !runs_as_processes(config) || ::geteuid() == 0) return;
  throw ConfigError(config.name, "network.namespaces",
                    "needs root (network namespaces, veth and tc); run as root or leave it "
                    "false and use network.link_gbps alone");
}

}  // namespace gradsync
