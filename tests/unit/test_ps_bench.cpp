#include <doctest/doctest.h>

#include <string>

#include "common/error.h"
#include "experiments/bench/ps_bench.h"
#include "experiments/bench/ps_loopback.h"

namespace gradsync {
namespace {

// Three chunks per shard with one shard, a short last chunk, and ranges that split chunks
// unevenly with three shards.
constexpr std::uint64_t kFloats = 2 * (std::uint64_t{1} << 17) + 5;

TEST_CASE("the ps side of the bench ends where a local replay of its steps ends") {
  for (const int shards : {1, 3}) {
    CAPTURE(shards);
    PsLoopback ps(kFloats, shards);
    CHECK(ps.check() == 0);  // nothing pushed yet: the initial parameters
    ps.round_trips(4);
    // Four momentum SGD steps moved the parameters (the gradient is zero only at every 17th
    // key), and every one of them matches the replay bit for bit.
    CHECK(ps.check() == 0);
    ps.finish();
  }
}

TEST_CASE("bench ps reports both sides and a ratio for every size") {
  PsBenchOptions options;
  options.floats = {1000, kFloats};
  options.shards = 2;
  options.rounds = 3;
  options.round_seconds = 0.005;
  const auto rows = run_ps_bench_rows(options);
  REQUIRE(rows.size() == 2);
  for (const PsBenchRow& row : rows) {
    CHECK(row.rounds == 3);
    CHECK(row.round_trips >= 1);
    CHECK(row.ps_ms > 0);
    CHECK(row.echo_ms > 0);
    CHECK(row.ratio_min <= row.ratio);
    CHECK(row.ratio <= row.ratio_max);
    CHECK(row.wrong == 0);
  }
  const std::string table = render_ps_bench(options, rows);
  CHECK(table.find("ps/raw") != std::string::npos);
  options.json = true;
  const std::string json = render_ps_bench(options, rows);
  CHECK(json.find("\"floats\": 1000,") != std::string::npos);
  CHECK(json.find("\"wrong\": 0}") != std::string::npos);
}

TEST_CASE("bench ps refuses options that cannot run, naming the flag") {
  PsBenchOptions options;
  options.floats = {0};
  CHECK_THROWS_WITH_AS(run_ps_bench_rows(options), doctest::Contains("--floats"), ConfigError);
  options.floats = {4};
  options.shards = 5;  // more shards than floats
  CHECK_THROWS_WITH_AS(run_ps_bench_rows(options), doctest::Contains("--shards"), ConfigError);
  options.shards = 1;
  options.rounds = 0;
  CHECK_THROWS_WITH_AS(run_ps_bench_rows(options), doctest::Contains("--rounds"), ConfigError);
}

}  // namespace
}  // namespace gradsync
