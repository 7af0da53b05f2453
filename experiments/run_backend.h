// What `gradsync run` checks and starts for a run's comm.backend before any results folder
// exists: a backend this build lacks, or one the run's other keys rule out, is refused in one
// line naming the key; comm.backend mpi starts its ranks through mpirun.
#pragma once

#include <string>
#include <vector>

#include "common/config.h"
#include "launch/launcher.h"

namespace gradsync {

// comm.backend mpi under `allreduce`: the ranks come from mpirun, not from gradsync's launcher.
bool starts_under_mpirun(const Config& config);

// mpirun's process for the run's ranks, each running `worker_args`, with the store's address
// (`master`, `port`); prints the command, as a user would type it, on stderr.
ProcessSpec mpirun_process(const Config& config, const std::vector<std::string>& worker_args,
                           const std::string& master, const std::string& port, long long origin_ns,
                           const std::string& run_id);

// comm.backend of a library this build was made without: refused with the package to install;
// mpi without mpirun, or with network namespaces, too.
void check_backend_available(const Config& config);

// network.namespaces needs root (launch/namespace_network.cpp refuses otherwise): known before
// the results folder exists, so refused then, in the same words.
void check_namespaces_allowed(const Config& config);

}  // namespace gradsync
