// `gradsync bench allreduce`: collective bandwidth in the manner of nccl-tests. N ranks run as N
// threads of this process, each with its own TcpRing (real TCP over 127.0.0.1, addresses
// exchanged through one InMemoryStore); message sizes are swept from min to max by a factor.
//
//   CollectiveBenchOptions options;
//   options.op = "allgather";
//   options.ranks = 4;
//   std::cout << run_collective_bench(options);   // the whole table, or JSON lines
//
// Per size: warm-up iterations, a barrier, timed iterations; the row's time is the maximum over
// ranks of each rank's mean per-iteration time (the collective is as slow as its slowest rank).
// Afterwards the buffers are re-initialised, the collective runs once more and every element
// is compared with its closed-form value ("#wrong"). When gradsync is built with Gloo, the
// same sweep runs on Gloo's ring over Gloo's TCP transport, with the same timing rules, and its
// columns follow ours. The formulas are in docs/benchmarks.md.
//
// Blocking: run_collective_bench returns when the sweep is done. Every wait (ring setup, each
// collective, the in-process rendezvous between rank threads) is bounded by options.timeout;
// a failure on any rank is rethrown from run_collective_bench after every thread has ended.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "allreduce/gloo/gloo_communicator.h"  // gloo_compiled_in(): the Gloo columns exist
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
  int iters = 0;  // timed iterations per size; 0: auto, enough for about 0.3 s per row
  bool json = false;
  bool gloo = true;  // add Gloo's columns when gradsync is built with Gloo
  std::chrono::milliseconds timeout{60000};
  // cpu: TcpRing ranks over loopback. gpu: NcclCommunicator ranks, one per GPU (threads of
  // this process), on device buffers; `ranks` 0 means every visible GPU. Same table either way.
  std::string device = "cpu";
};

// "512", "4K", "64M", "1G" (powers of 1024; a trailing "B" is allowed) to bytes. Throws
// gradsync::ConfigError quoting the text when it is not such a size.
std::size_t parse_size(const std::string& text);

// Runs the sweep; returns the table (header lines start with '#') or, with options.json, one
// JSON object per size. Throws ConfigError for invalid options before anything runs.
std::string run_collective_bench(const CollectiveBenchOptions& options);

// The same, with the wrong elements counted over every row: a caller that must not pass a
// wrong collective off as a fast one (`gradsync bench allreduce` exits 1) checks them.
struct CollectiveBenchReport {
  std::string text;
  std::uint64_t wrong = 0;       // gradsync's communicator (TcpRing, or NCCL)
  std::uint64_t gloo_wrong = 0;  // Gloo's, when it ran beside
};
CollectiveBenchReport run_collective_bench_report(const CollectiveBenchOptions& options);

}  // namespace gradsync
