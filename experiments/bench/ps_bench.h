// `gradsync bench ps`: the parameter server's push+pull round trip against raw ZeroMQ on the
// same bytes, measured side by side in one process on 127.0.0.1.
//
//   PsBenchOptions options;
//   options.floats = {1 << 20, 1 << 24};
//   std::cout << run_ps_bench(options);   // the table, or JSON lines
//
// The ps side is real: K PsShards (sync mode, momentum SGD) each serving on a thread of its
// own with its own ZeroMQ context, and one PsClient (N = 1) doing push_pull + wait, as a worker
// does every step. The raw side is a DEALER/ROUTER echo of one message of the same bytes,
// echoed without a copy and without an optimizer, in two contexts as two processes would have.
//
// Why rounds: on a small machine both sides share the same cores with their I/O threads, so
// whatever else the machine does moves both timings by tens of percent within seconds.
// Measuring all of one side and then all of the other puts that drift into the ratio; here each
// round times a batch of ps round trips and a batch of echoes right after each other (in
// alternating order), and the ratio is the median over rounds of each round's own ratio.
//
// Correctness: after the rounds, the client's parameters must equal a local Sgd replaying every
// step on the same gradients, element for element ("#wrong"); the ps is not allowed to be fast
// by skipping work.
//
// Blocking: run_ps_bench returns when every size is done; every wait is bounded by the client's
// and shards' timeout (60 s), and a failure on a shard thread is rethrown here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gradsync {

struct PsBenchOptions {
  std::vector<std::uint64_t> floats = {std::uint64_t{1} << 20, std::uint64_t{1} << 24};
  int shards = 1;
  int rounds = 21;             // paired rounds per size (odd, so the median is one round)
  double round_seconds = 0.1;  // each side's share of one round; sets the round trips per round
  bool json = false;
};

// One row of the result.
struct PsBenchRow {
  std::uint64_t floats = 0;
  int rounds = 0;
  int round_trips = 0;     // per side per round
  double ps_ms = 0;        // median over rounds of the mean round trip
  double echo_ms = 0;
  double ratio = 0;        // median over rounds of echo time / ps time: ps as a fraction of raw
  double ratio_min = 0;
  double ratio_max = 0;
  std::uint64_t wrong = 0;  // parameters that differ from the local replay
};

// Runs every size; throws ConfigError for invalid options before anything runs.
std::vector<PsBenchRow> run_ps_bench_rows(const PsBenchOptions& options);

// The rows as a fixed-width table (header lines start with '#') or one JSON object per row.
std::string render_ps_bench(const PsBenchOptions& options, const std::vector<PsBenchRow>& rows);

inline std::string run_ps_bench(const PsBenchOptions& options) {
  return render_ps_bench(options, run_ps_bench_rows(options));
}

}  // namespace gradsync
