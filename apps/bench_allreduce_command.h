// `gradsync bench allreduce`: the bandwidth of one collective (allreduce, broadcast, allgather)
// over a sweep of sizes, as nccl-tests reports it: TcpRing ranks (and Gloo's) on loopback, or
// NCCL ranks on GPUs. Its own file because it is the benchmark with the most options; the
// `bench` group (apps/bench_command.h) registers it.
//
//   const Command allreduce = add_bench_allreduce_command(*bench);
//
// run() blocks for the sweep, prints the table to stdout, and returns 1 (after one line on
// stderr) when any element came out wrong; it throws UsageError when --maxbytes is below
// --minbytes, and gradsync::Error (TimeoutError after --timeout-s) for main.
#pragma once

#include <CLI/CLI.hpp>

#include "apps/command.h"

namespace gradsync {

Command add_bench_allreduce_command(CLI::App& bench);

}  // namespace gradsync
