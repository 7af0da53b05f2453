// `gradsync bench ps`: the parameter server's push+pull round trip against raw ZeroMQ on the
// same bytes, measured side by side in one process on 127.0.0.1.
//
//   PsBenchOptions options;
//   options.floats = {1 << 20, 1 << 24};
//   std::cout << run_ps_bench(options);   // the table, or JSON lines
//
// Four sides (ps_loopback.h):
//   ps:        K PsShards (sync mode, momentum SGD) each serving on a thread of its own with its
//              own ZeroMQ context, and one PsClient (N = 1) doing push_pull + wait, as a worker
//              does every step;
//   chunked:   raw ZeroMQ moving the bytes the way the ps does (same chunks, same K
//              connections, all sent before any is received), echoed, nothing else: the
//              comparison that isolates what the ps adds (headers, the update on the shard,
//              the copy of the reply into the parameters);
//   1 message: raw ZeroMQ moving the whole payload as one message over one connection;
//   stream:    raw ZeroMQ loopback throughput (libzmq's local_thr/remote_thr): the round trip's
//              bytes, the payload twice, streamed one way in the ps's chunks over the same K
//              connections, dropped on arrival, one ack per connection at the end.
// Speeds are reported as raw time / ps time: 100% means the ps is as fast as raw ZeroMQ.
//
// Why rounds: on a small machine every side shares the same cores with its I/O threads, so
// whatever else the machine does moves the timings by tens of percent within seconds.
// Measuring all of one side and then all of another puts that drift into the ratio; here each
// round times a batch of each side right after each other (the order reversed every other
// round), and a ratio is the median over rounds of each round's own ratio.
//
// CPU: the ps's and the chunked echo's process CPU time per round trip is measured with their
// wall time. Where the ps is slower than raw ZeroMQ, it tells extra work (the ps spends more
// CPU) from waiting (the same CPU, spread worse over the round trip: fewer cores busy).
//
// Correctness: after the rounds, the client's parameters must equal a local Sgd replaying every
// step on the same gradients, element for element ("#wrong"); the ps is not allowed to be fast
// by skipping work.
//
// Blocking: run_ps_bench returns when every size is done; every wait is bounded by the client's
// and shards' timeout (60 s), and a failure on a server thread is rethrown here.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gradsync {

constexpr std::uint64_t kPsBenchMaxFloats = std::uint64_t{1} << 28;  // 1 GiB a payload

struct PsBenchOptions {
  std::vector<std::uint64_t> floats = {std::uint64_t{1} << 20, std::uint64_t{1} << 24};
  int shards = 1;
  int rounds = 21;             // paired rounds per size (odd, so the median is one round)
  double round_seconds = 0.1;  // each side's share of one round: its round trips (at least 5)
  bool json = false;
};

// A speed ratio over rounds: median, lowest and highest of base[r] / measured[r].
struct SpeedRatio {
  double median = 0;
  double min = 0;
  double max = 0;
};

struct PsBenchRow {
  std::uint64_t floats = 0;
  int rounds = 0;
  int round_trips = 0;  // per side per round
  double ps_ms = 0;     // median over rounds of the mean round trip
  double chunked_ms = 0;
  double one_message_ms = 0;
  double stream_ms = 0;       // the round trip's bytes, one way
  SpeedRatio vs_chunked;      // ps speed as a fraction of raw ZeroMQ in the ps's layout
  SpeedRatio vs_one_message;  // ... and of raw ZeroMQ sending one message
  SpeedRatio vs_stream;       // ... and of raw ZeroMQ's one-way throughput
  // CPU time per round trip (every thread of the process, median over rounds); cores busy:
  // that CPU time over the wall time; and, round by round, chunked cpu / ps cpu (below 1: the
  // ps spends more CPU on a round trip). Where both sides keep the same number of cores busy,
  // vs_chunked is about cpu_ratio.
  double ps_cpu_ms = 0;
  double chunked_cpu_ms = 0;
  double ps_cores_busy = 0;
  double chunked_cores_busy = 0;
  SpeedRatio cpu_ratio;
  std::uint64_t wrong = 0;  // parameters that differ from the local replay
};

// Runs every size; throws ConfigError for invalid options before anything runs.
std::vector<PsBenchRow> run_ps_bench_rows(const PsBenchOptions& options);

// The rows as a fixed-width table (header lines start with '#') or one JSON object per row.
std::string render_ps_bench(const PsBenchOptions& options, const std::vector<PsBenchRow>& rows);

inline std::string run_ps_bench(const PsBenchOptions& options) {
  return render_ps_bench(options, run_ps_bench_rows(options));
}

// ---- The pieces below are the measurement's rules, shared with the tests. ----

// Runs `rounds` rounds of every side, in order 0..n-1 in even rounds and n-1..0 in odd ones,
// so that no side always runs first (on the warmer or the colder machine). Returns each side's
// result per round: times[side][round].
std::vector<std::vector<double>> paired_rounds(const std::vector<std::function<double()>>& sides,
                                               int rounds);

// base[r] / measured[r] for each round r, summarised: how fast `measured` ran relative to
// `base` in the same round (below 1: slower). Both of the same, non-zero length.
SpeedRatio speed_ratio(const std::vector<double>& measured, const std::vector<double>& base);

double median(std::vector<double> values);

}  // namespace gradsync
