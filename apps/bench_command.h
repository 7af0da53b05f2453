// `gradsync bench ...`: the benchmarks, one sub-subcommand each: `bench mlp` (training
// throughput), `bench allreduce` (collective bandwidth, as nccl-tests), `bench ps` (parameter
// server round trip against raw ZeroMQ).
//
//   const Command bench = add_bench_command(app);
//   app.parse(argc, argv);
//   if (bench.app->parsed()) return bench.run();   // runs whichever benchmark was parsed
//
// run() blocks while the benchmark runs, prints its table to stdout, and returns 1 (after one
// line on stderr) when a benchmark counted wrong results: a fast wrong answer is a failure. It
// throws UsageError when --maxbytes is below --minbytes, and gradsync::Error for main.
#pragma once

#include <CLI/CLI.hpp>

#include "apps/command.h"

namespace gradsync {

Command add_bench_command(CLI::App& parent);

}  // namespace gradsync
