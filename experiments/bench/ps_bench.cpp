#include "experiments/bench/ps_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "common/error.h"
#include "experiments/bench/ps_loopback.h"

namespace gradsync {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kWhere = "gradsync bench ps";
constexpr std::uint64_t kMaxFloats = std::uint64_t{1} << 28;  // 1 GiB a payload
constexpr int kWarmupRoundTrips = 3;
constexpr int kMaxRoundTrips = 1000;  // per side per round

template <typename Side>
double seconds_per_round_trip(Side& side, int count) {
  const auto start = Clock::now();
  side.round_trips(count);
  return std::chrono::duration<double>(Clock::now() - start).count() / count;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

void validate(const PsBenchOptions& o) {
  if (o.floats.empty()) throw ConfigError(kWhere, "--floats", "name at least one size");
  for (const std::uint64_t n : o.floats) {
    if (n == 0 || n > kMaxFloats) {
      throw ConfigError(kWhere, "--floats",
                        std::to_string(n) + " floats: sizes go from 1 to " +
                            std::to_string(kMaxFloats) + " (1 GiB)");
    }
    if (static_cast<std::uint64_t>(o.shards) > n) {
      throw ConfigError(kWhere, "--shards",
                        std::to_string(o.shards) + " shards for " + std::to_string(n) +
                            " floats: every shard needs at least one");
    }
  }
  if (o.shards < 1) throw ConfigError(kWhere, "--shards", "must be at least 1");
  if (o.rounds < 1) throw ConfigError(kWhere, "--rounds", "must be at least 1");
  if (!(o.round_seconds > 0)) throw ConfigError(kWhere, "--round-seconds", "must be positive");
}

PsBenchRow measure(const PsBenchOptions& o, std::uint64_t floats) {
  PsLoopback ps(floats, o.shards);
  ZmqEchoLoopback echo(floats);
  ps.round_trips(kWarmupRoundTrips);
  echo.round_trips(kWarmupRoundTrips);
  // Round trips per side per round: enough for round_seconds at the ps's pace.
  const double guess = seconds_per_round_trip(ps, kWarmupRoundTrips);
  const int count = static_cast<int>(
      std::clamp(o.round_seconds / std::max(guess, 1e-9), 1.0, double{kMaxRoundTrips}));
  std::vector<double> ps_times, echo_times, ratios;
  for (int r = 0; r < o.rounds; ++r) {
    // Alternate which side goes first, so neither always runs on the warmer machine.
    double p, e;
    if (r % 2 == 0) {
      p = seconds_per_round_trip(ps, count);
      e = seconds_per_round_trip(echo, count);
    } else {
      e = seconds_per_round_trip(echo, count);
      p = seconds_per_round_trip(ps, count);
    }
    ps_times.push_back(p);
    echo_times.push_back(e);
    ratios.push_back(e / p);
  }
  PsBenchRow row;
  row.floats = floats;
  row.rounds = o.rounds;
  row.round_trips = count;
  row.ps_ms = median(ps_times) * 1e3;
  row.echo_ms = median(echo_times) * 1e3;
  row.ratio = median(ratios);
  row.ratio_min = *std::min_element(ratios.begin(), ratios.end());
  row.ratio_max = *std::max_element(ratios.begin(), ratios.end());
  row.wrong = ps.check();
  ps.finish();
  return row;
}

std::string sprint(const char* fmt, auto... args) {
  char text[512];
  std::snprintf(text, sizeof text, fmt, args...);
  return text;
}

// GB/s of a round trip: the payload goes out and comes back.
double gb_per_s(std::uint64_t floats, double ms) {
  return ms > 0 ? 2.0 * static_cast<double>(floats * sizeof(float)) / (ms * 1e-3) / 1e9 : 0.0;
}

}  // namespace

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
        "the shards)\n# against raw ZeroMQ (DEALER/ROUTER echo of one message of the same "
        "bytes, zero-copy), 127.0.0.1.\n# %d rounds per size; each round times both sides "
        "back to back, in alternating order.\n# times: median over rounds of the mean round "
        "trip; GB/s: payload out and back; ps/raw:\n# median over rounds of raw time / ps time "
        "(min, max beside it); #wrong: parameters != a local replay\n",
        o.shards, o.shards == 1 ? "" : "s", o.rounds);
    out += sprint("#%11s %12s %6s %7s %9s %9s %9s %9s %7s %7s %7s %7s\n", "floats", "bytes",
                  "rounds", "trips", "ps(ms)", "raw(ms)", "ps(GB/s)", "raw(GB/s)", "ps/raw",
                  "min", "max", "#wrong");
  }
  for (const PsBenchRow& r : rows) {
    const std::uint64_t bytes = r.floats * sizeof(float);
    if (o.json) {
      out += sprint(
          "{\"floats\": %llu, \"bytes\": %llu, \"shards\": %d, \"rounds\": %d, "
          "\"round_trips_per_round\": %d, \"ps_ms\": %.4f, \"raw_ms\": %.4f, "
          "\"ps_over_raw\": %.4f, \"ps_over_raw_min\": %.4f, \"ps_over_raw_max\": %.4f, "
          "\"wrong\": %llu}\n",
          static_cast<unsigned long long>(r.floats), static_cast<unsigned long long>(bytes),
          o.shards, r.rounds, r.round_trips, r.ps_ms, r.echo_ms, r.ratio, r.ratio_min,
          r.ratio_max, static_cast<unsigned long long>(r.wrong));
      continue;
    }
    out += sprint(" %11llu %12llu %6d %7d %9.3f %9.3f %9.2f %9.2f %6.0f%% %6.0f%% %6.0f%% %7llu\n",
                  static_cast<unsigned long long>(r.floats),
                  static_cast<unsigned long long>(bytes), r.rounds, r.round_trips, r.ps_ms,
                  r.echo_ms, gb_per_s(r.floats, r.ps_ms), gb_per_s(r.floats, r.echo_ms),
                  r.ratio * 100, r.ratio_min * 100, r.ratio_max * 100,
                  static_cast<unsigned long long>(r.wrong));
  }
  return out;
}

}  // namespace gradsync
