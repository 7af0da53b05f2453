// Starting `gradsync bench allreduce` once per rank, for --ranks-as processes and mpirun: the
// command line of one rank, and gradsync's own launcher for processes. (mpirun replaces the
// command's process instead, so that its output and exit code are the command's: apps/ does
// that exec with mpirun_argv.)
//
//   run_rank_processes(options);              // blocks until every rank has exited
//   execvp("mpirun", mpirun_argv(options))    // apps/bench_allreduce_command.cpp
//
// Each rank runs `<this executable> bench allreduce <the same options> --rank-process
// --store-port P`, which calls run_collective_bench_rank (collective_bench.h). Rank 0 serves
// the Store on 127.0.0.1:P, a port that was free when the command line was made.
#pragma once

#include <string>
#include <vector>

#include "bench/collective_bench.h"

namespace gradsync {

// The variable that tells rank 0 where to print: a descriptor of the launcher's stdout that
// the ranks inherit (gradsync's launcher relays a child's own output to stderr, prefixed).
inline constexpr const char* kTableFdVariable = "GRADSYNC_BENCH_TABLE_FD";

// The arguments after the executable that run one rank of `options` (resolved, as
// resolve_backends returns them) with the Store on `store_port`.
std::vector<std::string> rank_process_args(const CollectiveBenchOptions& options, int store_port);

// --ranks-as processes: options.ranks copies of this executable under launch/launcher.h (any
// rank failing stops the others; its error is thrown, naming it). Rank 0 prints the table to
// this process's stdout, each row as it completes.
void run_rank_processes(const CollectiveBenchOptions& options);

// --ranks-as mpirun: launch/mpirun_command.h's command, as `gradsync run` starts mpi runs
// (--oversubscribe --bind-to none -np N --mca btl self,tcp, --allow-run-as-root as root), then
// this executable. Throws ConfigError naming openmpi-bin when there is no mpirun on PATH.
std::vector<std::string> mpirun_argv(const CollectiveBenchOptions& options);

}  // namespace gradsync
