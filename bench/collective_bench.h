// `gradsync bench allreduce`: collective bandwidth in the manner of nccl-tests, for each of the
// backends people choose between (comm.backend: tcp, gloo, mpi; nccl on GPUs), in one table.
// Message sizes are swept from min to max by a factor; for each size every backend runs in turn,
// and each row is printed as it completes.
//
//   CollectiveBenchOptions options;
//   options.backends = {"tcp", "gloo"};
//   options.ranks = 4;
//   run_collective_bench_report(options, [](const std::string& text) { print_and_flush(text); });
//
// Ranks (options.ranks_as): threads of this process over one in-memory Store (the default,
// tcp and gloo), or one process per rank meeting through a TcpStore served by rank 0:
// `processes` (this executable started again by gradsync's launcher, launch/launcher.h) or
// `mpirun` (this executable started by mpirun; the mpi backend needs it). Process ranks run
// run_collective_bench_rank; collective_launch.h builds their command lines.
//
// Per size and backend, out of place then in place (nccl-tests' two forms; collective_ops.h
// says how gradsync composes the form its Communicator lacks): warm-up iterations, a barrier,
// timed iterations; a form's time is the maximum over ranks of each rank's mean per-iteration
// time (the collective is as slow as its slowest rank). Afterwards the buffers are
// re-initialised, the collective runs once more and every element is compared with its
// closed-form value ("#wrong"). The formulas are in docs/benchmarks.md.
//
// Blocking: both run_* functions return when the sweep is done. Every wait (connecting, each
// collective, the ranks' exchange of numbers) is bounded by options.timeout; a failure on any
// rank fails the others promptly and is thrown.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/collective_ops.h"
#include "bench/collective_sweep.h"

namespace gradsync {

struct CollectiveBenchOptions {
  std::string op = "allreduce";  // allreduce | broadcast | allgather
  std::size_t min_bytes = 4096;
  std::size_t max_bytes = 64 << 20;
  int factor = 2;  // each size is the previous one times this
  int ranks = 2;
  int warmup = 5;
  int iters = 0;  // timed iterations per form; 0: auto, enough for about `seconds`
  // Timed work each measurement aims at when `iters` is 0 (5 to 1000 iterations): longer averages
  // out more of a shared machine's noise, at the cost of the sweep's time.
  double seconds = 0.3;
  bool json = false;
  // tcp, gloo, mpi (cpu) or nccl (gpu), in the order each size runs them. Empty: every backend
  // of this build that runs as threads (tcp, and gloo when built with it), or nccl on GPUs.
  std::vector<std::string> backends;
  // threads | processes | mpirun; empty: mpirun when the backends include mpi, else threads.
  std::string ranks_as;
  std::chrono::milliseconds timeout{60000};
  // cpu: host buffers. gpu: NcclCommunicator ranks, one per GPU (threads of this process), on
  // device buffers; `ranks` 0 means every visible GPU. Same table either way.
  std::string device = "cpu";
  // gloo and mpi: the header exchange before each collective (comm.desync_check); off measures
  // the library under the wrapper alone, as PyTorch runs without TORCH_DISTRIBUTED_DEBUG.
  bool desync_check = true;
  // gloo: its allreduce algorithm (comm.algorithm: ring, ring_chunked, halving_doubling) and the
  // pairs it runs on (comm.gloo_pairs: async, sync, busy_poll; sync with halving_doubling only).
  std::string gloo_algorithm = "ring";
  std::string gloo_pairs = "async";
};

// "512", "4K", "64M", "1G" (powers of 1024; a trailing "B" is allowed) to bytes. Throws
// gradsync::ConfigError quoting the text when it is not such a size.
std::size_t parse_size(const std::string& text);

// options.backends and options.ranks_as with their defaults filled in and checked: an unknown
// backend, one this build lacks (naming the Debian package that brings it), mpi without
// mpirun, or processes on GPUs is a one-line ConfigError (key --backend or --ranks-as).
CollectiveBenchOptions resolve_backends(const CollectiveBenchOptions& options);

// Receives the output piece by piece (the header, each row, the footer) as it is produced.
using BenchSink = std::function<void(const std::string&)>;

// What a run printed, with the wrong elements counted over every row and backend: a caller that
// must not pass a wrong collective off as a fast one (`gradsync bench allreduce` exits 1)
// checks them.
struct CollectiveBenchReport {
  std::string text;  // the table, or with options.json one JSON document
  std::uint64_t wrong = 0;
};

// The sweep with ranks as threads (ranks_as "threads"). Throws ConfigError for invalid
// options before anything runs, including ranks_as processes or mpirun, which need this
// executable started once per rank (collective_launch.h).
CollectiveBenchReport run_collective_bench_report(const CollectiveBenchOptions& options,
                                                  const BenchSink& sink = nullptr);
std::string run_collective_bench(const CollectiveBenchOptions& options);  // the text alone

// One rank of a multi-process sweep: its rank and the world size from the launcher's
// environment (launch/rendezvous_env.h), which must match options.ranks; rank 0 serves the
// Store on 127.0.0.1:store_port, and alone produces output (the report of other ranks is
// empty). Returns when every rank is done.
CollectiveBenchReport run_collective_bench_rank(const CollectiveBenchOptions& options,
                                                int store_port, const BenchSink& sink = nullptr);

}  // namespace gradsync
