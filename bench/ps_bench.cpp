#include "bench/ps_bench.h"

#include <algorithm>
#include <chrono>
#include <ctime>

#include "bench/ps_loopback.h"
#include "bench/sprint.h"
#include "common/error.h"

namespace gradsync {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kWhere = "gradsync bench ps";
constexpr int kWarmupRoundTrips = 3;
constexpr int kMaxRoundTrips = 1000;  // per side per round
// At 16M floats 0.1 s is one or two round trips, and a round of those measured mostly the
// machine's noise: the ratio of two runs differed by 15 points.
constexpr int kMinRoundTrips = 5;

// CPU time of every thread of this process: the side being timed, its I/O threads and its
// servers. The sides not being timed idle meanwhile: each echo server and shard wakes from
// poll() 10-20 times a second, the ps client's heartbeat once; microseconds each. Loopback work
// the kernel defers to ksoftirqd is not counted, on either side.
double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// Wall-clock seconds per round trip; with `cpu`, also appends the CPU seconds per round trip.
template <typename Side>
double seconds_per_round_trip(Side& side, int count, std::vector<double>* cpu = nullptr) {
  const double cpu_start = process_cpu_seconds();
  const auto start = Clock::now();
  side.round_trips(count);
  const double wall = std::chrono::duration<double>(Clock::now() - start).count() / count;
  if (cpu != nullptr) cpu->push_back((process_cpu_seconds() - cpu_start) / count);
  return wall;
}

void validate(const PsBenchOptions& o) {
  if (o.floats.empty()) throw ConfigError(kWhere, "--floats", "name at least one size");
  if (o.shards < 1) throw ConfigError(kWhere, "--shards", "must be at least 1");
  if (o.rounds < 1) throw ConfigError(kWhere, "--rounds", "must be at least 1");
  if (!(o.round_seconds > 0)) throw ConfigError(kWhere, "--round-seconds", "must be positive");
  for (const std::uint64_t n : o.floats) {
    if (n == 0 || n > kPsBenchMaxFloats) {
      throw ConfigError(kWhere, "--floats",
                        std::to_string(n) + " floats: sizes go from 1 to " +
                            std::to_string(kPsBenchMaxFloats) + " (1 GiB)");
    }
    if (static_cast<std::uint64_t>(o.shards) > n) {
      throw ConfigError(kWhere, "--shards",
                        std::to_string(o.shards) + " shards for " + std::to_string(n) +
                            " floats: every shard needs at least one");
    }
  }
}

PsBenchRow measure(const PsBenchOptions& o, std::uint64_t floats) {
  PsLoopback ps(floats, o.shards);
  ZmqRawLoopback chunked(floats, ZmqRawLoopback::kAsPs, o.shards);
  ZmqRawLoopback one_message(floats, ZmqRawLoopback::kOneMessage, 1);
  ZmqRawLoopback stream(floats, ZmqRawLoopback::kStream, o.shards);
  ps.round_trips(kWarmupRoundTrips);
  chunked.round_trips(kWarmupRoundTrips);
  one_message.round_trips(kWarmupRoundTrips);
  stream.round_trips(kWarmupRoundTrips);
  // Round trips per side per round: enough for round_seconds at the ps's pace, at least 5.
  const double guess = seconds_per_round_trip(ps, kWarmupRoundTrips);
  const int count = static_cast<int>(std::clamp(o.round_seconds / std::max(guess, 1e-9),
                                                double{kMinRoundTrips}, double{kMaxRoundTrips}));
  std::vector<double> ps_cpu, chunked_cpu;
  const auto times =
      paired_rounds({[&] { return seconds_per_round_trip(ps, count, &ps_cpu); },
                     [&] { return seconds_per_round_trip(chunked, count, &chunked_cpu); },
                     [&] { return seconds_per_round_trip(one_message, count); },
                     [&] { return seconds_per_round_trip(stream, count); }},
                    o.rounds);
  PsBenchRow row;
  row.floats = floats;
  row.rounds = o.rounds;
  row.round_trips = count;
  row.ps_ms = median(times[0]) * 1e3;
  row.chunked_ms = median(times[1]) * 1e3;
  row.one_message_ms = median(times[2]) * 1e3;
  row.stream_ms = median(times[3]) * 1e3;
  row.vs_chunked = speed_ratio(times[0], times[1]);
  row.vs_one_message = speed_ratio(times[0], times[2]);
  row.vs_stream = speed_ratio(times[0], times[3]);
  row.ps_cpu_ms = median(ps_cpu) * 1e3;
  row.chunked_cpu_ms = median(chunked_cpu) * 1e3;
  row.cpu_ratio = speed_ratio(ps_cpu, chunked_cpu);
  row.ps_cores_busy = row.ps_cpu_ms / row.ps_ms;
  row.chunked_cores_busy = row.chunked_cpu_ms / row.chunked_ms;
  row.wrong = ps.check();
  ps.finish();
  return row;
}

// GB/s of a round trip: the payload goes out and comes back.
double gb_per_s(std::uint64_t floats, double ms) {
  return ms > 0 ? 2.0 * static_cast<double>(floats * sizeof(float)) / (ms * 1e-3) / 1e9 : 0.0;
}

}  // namespace

double median(std::vector<double> values) {
  GRADSYNC_CHECK(!values.empty(), "a median of nothing");
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::vector<std::vector<double>> paired_rounds(const std::vector<std::function<double()>>& sides,
                                               int rounds) {
  const std::size_t n = sides.size();
  std::vector<std::vector<double>> times(n);
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t side = r % 2 == 0 ? i : n - 1 - i;
      times[side].push_back(sides[side]());
    }
  }
  return times;
}

SpeedRatio speed_ratio(const std::vector<double>& measured, const std::vector<double>& base) {
  GRADSYNC_CHECK(!measured.empty() && measured.size() == base.size(),
                 "speed_ratio needs one time of each side per round");
  std::vector<double> ratios;
  for (std::size_t r = 0; r < measured.size(); ++r) ratios.push_back(base[r] / measured[r]);
  const auto [low, high] = std::minmax_element(ratios.begin(), ratios.end());
  return {median(ratios), *low, *high};
}

std::vector<PsBenchRow> run_ps_bench_rows(const PsBenchOptions& options) {
  validate(options);
  std::vector<PsBenchRow> rows;
  for (const std::uint64_t floats : options.floats) rows.push_back(measure(options, floats));
  return rows;
}

std::string render_ps_bench(const PsBenchOptions& o, const std::vector<PsBenchRow>& rows) {
  std::string out;
  if (!o.json) {
    out += sprint(
        "# gradsync bench ps: push+pull round trip (1 worker, %d shard%s, sync, momentum SGD on "
        "the shards)\n# against raw ZeroMQ moving the same bytes (zero-copy, no update): "
        "'chunked' echoed in the ps's chunks over\n# the same %d connection%s, '1 msg' echoed "
        "as one message, 'stream' one way (the payload twice,\n# in the ps's chunks: raw "
        "loopback throughput, as libzmq's local_thr). 127.0.0.1; %d rounds per size, each\n# "
        "timing every side back to back, the order reversed every other round. times: median "
        "over rounds\n# of the mean round trip; GB/s: payload out and back; vs: median over "
        "rounds of raw time / ps time\n# (100%%: as fast as raw), for chunked the lowest and "
        "highest round beside it; #wrong: parameters\n# != a local replay of the steps; "
        "cpu(ms): median CPU time of all threads per round trip; cores:\n# cpu / time, "
        "ps/chunked; cpu ratio: median over rounds of chunked cpu / ps cpu. Where both sides\n# "
        "keep the cores equally busy, 'vs chunked' is about the cpu ratio: the ps is as far "
        "behind as the\n# work it adds\n",
        o.shards, o.shards == 1 ? "" : "s", o.shards, o.shards == 1 ? "" : "s", o.rounds);
    out += sprint(
        "#%11s %12s %6s %6s %8s %11s %9s %10s %8s %10s %6s %6s %9s %9s %11s %16s %9s %9s %7s\n",
        "floats", "bytes", "rounds", "trips", "ps(ms)", "chunked(ms)", "1msg(ms)", "stream(ms)",
        "ps(GB/s)", "vs chunked", "min", "max", "vs 1msg", "vs stream", "ps cpu(ms)",
        "chunked cpu(ms)", "cores", "cpu ratio", "#wrong");
  }
  for (const PsBenchRow& r : rows) {
    const auto floats = static_cast<unsigned long long>(r.floats);
    const auto wrong = static_cast<unsigned long long>(r.wrong);
    if (o.json) {
      out += sprint(
          "{\"floats\": %llu, \"bytes\": %llu, \"shards\": %d, \"rounds\": %d, "
          "\"round_trips_per_round\": %d, \"ps_ms\": %.4f, \"raw_chunked_ms\": %.4f, "
          "\"raw_one_message_ms\": %.4f, \"raw_stream_ms\": %.4f, "
          "\"ps_speed_vs_raw_chunked\": %.4f, "
          "\"ps_speed_vs_raw_chunked_min\": %.4f, \"ps_speed_vs_raw_chunked_max\": %.4f, "
          "\"ps_speed_vs_raw_one_message\": %.4f, \"ps_speed_vs_raw_stream\": %.4f, "
          "\"ps_speed_vs_raw_stream_min\": %.4f, \"ps_speed_vs_raw_stream_max\": %.4f, "
          "\"ps_cpu_ms\": %.4f, "
          "\"raw_chunked_cpu_ms\": %.4f, \"ps_cores_busy\": %.3f, \"raw_chunked_cores_busy\": "
          "%.3f, \"raw_chunked_cpu_vs_ps\": %.4f, \"raw_chunked_cpu_vs_ps_min\": %.4f, "
          "\"raw_chunked_cpu_vs_ps_max\": %.4f, \"wrong\": %llu}\n",
          floats, floats * sizeof(float), o.shards, r.rounds, r.round_trips, r.ps_ms, r.chunked_ms,
          r.one_message_ms, r.stream_ms, r.vs_chunked.median, r.vs_chunked.min, r.vs_chunked.max,
          r.vs_one_message.median, r.vs_stream.median, r.vs_stream.min, r.vs_stream.max,
          r.ps_cpu_ms, r.chunked_cpu_ms, r.ps_cores_busy, r.chunked_cores_busy, r.cpu_ratio.median,
          r.cpu_ratio.min, r.cpu_ratio.max, wrong);
      continue;
    }
    out += sprint(
        " %11llu %12llu %6d %6d %8.3f %11.3f %9.3f %10.3f %8.2f %9.0f%% %5.0f%% %5.0f%% %8.0f%% "
        "%8.0f%% %11.3f %16.3f %4.1f/%-4.1f %8.0f%% %7llu\n",
        floats, floats * sizeof(float), r.rounds, r.round_trips, r.ps_ms, r.chunked_ms,
        r.one_message_ms, r.stream_ms, gb_per_s(r.floats, r.ps_ms), r.vs_chunked.median * 100,
        r.vs_chunked.min * 100, r.vs_chunked.max * 100, r.vs_one_message.median * 100,
        r.vs_stream.median * 100, r.ps_cpu_ms, r.chunked_cpu_ms, r.ps_cores_busy,
        r.chunked_cores_busy, r.cpu_ratio.median * 100, wrong);
  }
  return out;
}

}  // namespace gradsync
