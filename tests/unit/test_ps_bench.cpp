// `gradsync bench ps`: its sides do the work they claim (the ps's parameters are a replay of its
// steps; the raw echo returns every chunk), its rounds alternate the order, its ratios point the
// right way, and a half-finished side leaves without waiting for a timeout.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "bench/ps_bench.h"
#include "bench/ps_loopback.h"
#include "common/error.h"
#include "common/wire_format.h"

namespace gradsync {
namespace {

// Three chunks per shard with one shard, the last one short; with three shards each range
// spans two chunks, and the ranges split the buffer where no chunk boundary is.
constexpr std::uint64_t kFloats = 3 * 2 * wire::kChunkKeys + 5;

TEST_CASE("the ps side of the bench ends where a local replay of its steps ends") {
  for (const int shards : {1, 3}) {
    CAPTURE(shards);
    PsLoopback ps(kFloats, shards);
    ps.round_trips(4);
    CHECK(ps.steps() == 4);
    // The gradient is zero at every 17th key only: four momentum steps moved all the others,
    // and every parameter matches the replay of four steps bit for bit.
    CHECK(ps.moved() == kFloats - (kFloats + 8) / 17);
    CHECK(ps.check() == 0);
    ps.finish();
  }
}

TEST_CASE("the raw sides echo the payload in one message or in the ps's chunks, or stream it") {
  for (const auto layout :
       {ZmqRawLoopback::kOneMessage, ZmqRawLoopback::kAsPs, ZmqRawLoopback::kStream}) {
    ZmqRawLoopback raw(kFloats, layout, 3);
    // Returns once every message came back with every byte, or every server acked all the
    // bytes its connection carried: a short echo throws, a short stream times out.
    CHECK_NOTHROW(raw.round_trips(3));
  }
}

TEST_CASE("a ps side destroyed without finish() leaves at once, not after the shards' timeout") {
  const auto start = std::chrono::steady_clock::now();
  {
    PsLoopback ps(1000, 2);
    ps.round_trips(1);
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
}

TEST_CASE("paired rounds reverse the order of the sides every other round") {
  std::string order;
  const auto times = paired_rounds({[&] {
                                      order += 'a';
                                      return 1.0;
                                    },
                                    [&] {
                                      order += 'b';
                                      return 2.0;
                                    },
                                    [&] {
                                      order += 'c';
                                      return 3.0;
                                    }},
                                   3);
  CHECK(order == "abccbaabc");
  REQUIRE(times.size() == 3);
  CHECK(times[1] == std::vector<double>{2.0, 2.0, 2.0});
}

TEST_CASE("a speed ratio is raw time over ps time, the median of each round's own ratio") {
  // Per round the ps ran at 50%, 90% and 100% of raw speed: the median round says 90%. The
  // ratio of the medians (1 / 2 = 50%) would let the round where the machine slowed both
  // sides (9 and 10) decide nothing, and mix times that were not measured together.
  const SpeedRatio r = speed_ratio({2.0, 10.0, 1.0}, {1.0, 9.0, 1.0});
  CHECK(r.median == doctest::Approx(0.9));
  CHECK(r.min == doctest::Approx(0.5));
  CHECK(r.max == doctest::Approx(1.0));
  CHECK(median({3.0, 1.0, 2.0, 10.0}) == doctest::Approx(2.5));
}

TEST_CASE("bench ps reports every side and the replay check for every size") {
  PsBenchOptions options;
  options.floats = {1000, kFloats};
  options.shards = 2;
  options.rounds = 3;
  options.round_seconds = 0.005;
  const auto rows = run_ps_bench_rows(options);
  REQUIRE(rows.size() == 2);
  for (const PsBenchRow& row : rows) {
    CHECK(row.wrong == 0);
    CHECK(row.vs_chunked.median > 0);
    CHECK(row.vs_one_message.median > 0);
    CHECK(row.vs_stream.median > 0);
    CHECK(row.stream_ms > 0);
    // CPU per round trip is the round trip's own: no more than every core for its whole time
    // (a little slack for the clocks being read one after the other).
    const double cores = std::max(1u, std::thread::hardware_concurrency());
    CHECK(row.ps_cpu_ms > 0);
    CHECK(row.ps_cpu_ms <= row.ps_ms * cores * 1.1 + 0.05);
    CHECK(row.chunked_cpu_ms > 0);
    CHECK(row.chunked_cpu_ms <= row.chunked_ms * cores * 1.1 + 0.05);
    CHECK(row.ps_cores_busy == doctest::Approx(row.ps_cpu_ms / row.ps_ms));
    // The ratio is chunked over ps, not ps over chunked: the ratio of the medians lies within
    // the rounds' own ratios.
    const double of_medians = row.chunked_cpu_ms / row.ps_cpu_ms;
    CHECK(row.cpu_ratio.min <= of_medians * 1.000001);
    CHECK(of_medians <= row.cpu_ratio.max * 1.000001);
  }
  options.json = true;
  const std::string json = render_ps_bench(options, rows);
  CHECK(json.find("\"floats\": 1000,") != std::string::npos);
  CHECK(json.find("\"ps_speed_vs_raw_chunked\": ") != std::string::npos);
  CHECK(json.find("\"ps_speed_vs_raw_stream\": ") != std::string::npos);
  CHECK(json.find("\"raw_chunked_cpu_vs_ps\": ") != std::string::npos);
}

TEST_CASE("bench ps refuses options that cannot run, naming the flag") {
  PsBenchOptions options;
  options.floats = {0};
  CHECK_THROWS_WITH_AS(run_ps_bench_rows(options), doctest::Contains("--floats"), ConfigError);
  options.floats = {4};
  options.shards = 5;  // more shards than floats
  CHECK_THROWS_WITH_AS(run_ps_bench_rows(options), doctest::Contains("--shards"), ConfigError);
  options.shards = -1;
  CHECK_THROWS_WITH_AS(run_ps_bench_rows(options), doctest::Contains("at least 1"), ConfigError);
  options.shards = 1;
  options.rounds = 0;
  CHECK_THROWS_WITH_AS(run_ps_bench_rows(options), doctest::Contains("--rounds"), ConfigError);
}

}  // namespace
}  // namespace gradsync
