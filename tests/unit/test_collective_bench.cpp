#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "allreduce/gloo/gloo_communicator.h"
#include "allreduce/make_communicator.h"
#include "bench/collective_bench.h"
#include "bench/collective_table.h"
#include "common/error.h"

namespace gradsync {
namespace {

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// The table's data rows (header lines start with '#'), split into cells.
std::vector<std::vector<std::string>> data_rows(const std::string& table) {
  std::vector<std::vector<std::string>> rows;
  for (const std::string& line : split_lines(table)) {
    if (!line.empty() && line[0] != '#') rows.push_back(words(line));
  }
  return rows;
}

// Does nothing: what a broken collective looks like to the checker.
class IdleRank final : public BenchRank {
 public:
  void barrier() override {}
  void run(RankBuffers&, bool) override {}
};

// Each call sleeps `usual`, but the calls numbered in `slow` (from 0) sleep `slow_time`.
class SleepingRank final : public BenchRank {
 public:
  SleepingRank(std::vector<int> slow, std::chrono::milliseconds slow_time,
               std::chrono::milliseconds usual)
      : slow_(std::move(slow)), slow_time_(slow_time), usual_(usual) {}
  void barrier() override {}
  void run(RankBuffers&, bool) override {
    const bool is_slow = std::find(slow_.begin(), slow_.end(), calls_++) != slow_.end();
    std::this_thread::sleep_for(is_slow ? slow_time_ : usual_);
  }

 private:
  const std::vector<int> slow_;
  const std::chrono::milliseconds slow_time_, usual_;
  int calls_ = 0;
};

CollectiveBenchOptions tiny(int ranks, const std::string& op) {
  CollectiveBenchOptions options;
  options.op = op;
  options.ranks = ranks;
  options.min_bytes = 4096;
  options.max_bytes = 16384;
  options.warmup = 1;
  options.iters = 3;
  options.timeout = std::chrono::milliseconds(20000);
  return options;
}

// The backends a default run has: tcp, and gloo where built.
std::vector<std::string> default_backends() {
  if (gloo_compiled_in()) return {"tcp", "gloo"};
  return {"tcp"};
}

}  // namespace

TEST_CASE("parse_size reads plain bytes and K/M/G suffixes") {
  CHECK(parse_size("512") == 512);
  CHECK(parse_size("4K") == 4096);
  CHECK(parse_size("4k") == 4096);
  CHECK(parse_size("64M") == 64u << 20);
  CHECK(parse_size("64MB") == 64u << 20);
  CHECK(parse_size("1G") == 1u << 30);
  CHECK(parse_size("0") == 0);
}

TEST_CASE("parse_size rejects what is not a size, quoting it") {
  for (const char* bad :
       {"", "K", "-4K", "4X", "4KK", "4 K", "1.5M", "4Ki", "99999999999999999999"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(parse_size(bad), ConfigError);
    try {
      parse_size(bad);
    } catch (const ConfigError& e) {
      CHECK(std::string(e.what()).find("'" + std::string(bad) + "'") != std::string::npos);
    }
  }
}

TEST_CASE("each plug-in's closed form matches the collective computed directly") {
  for (int n : {1, 2, 3, 7}) {
    const std::size_t count = 7 * 11 + 3 * static_cast<std::size_t>(n);
    std::vector<RankBuffers> ranks(static_cast<std::size_t>(n));
    for (const char* name : {"allreduce", "broadcast", "allgather"}) {
      CAPTURE(n);
      CAPTURE(name);
      const CollectiveOp& op = find_collective_op(name);
      const std::size_t c = op.count(count * sizeof(float), n);
      for (bool in_place : {false, true}) {
        CAPTURE(in_place);
        for (int r = 0; r < n; ++r) op.init(r, n, c, in_place, ranks[r]);
        RankBuffers result;
        result.out.assign(c, 0.0f);
        const std::size_t part = c / static_cast<std::size_t>(n);
        // A rank's input: `in` out of place; in place the output itself (allgather: its part).
        auto input = [&](int r, std::size_t i) {
          if (!in_place) return ranks[r].in[i];
          return op.name == "allgather" ? ranks[r].out[r * part + i] : ranks[r].out[i];
        };
        for (std::size_t i = 0; i < c; ++i) {
          if (op.name == "allreduce") {
            for (int r = 0; r < n; ++r) result.out[i] += input(r, i);
          } else if (op.name == "broadcast") {
            result.out[i] = input(0, i);
          } else {
            result.out[i] = input(static_cast<int>(i / part), i % part);
          }
        }
        CHECK(count_wrong(op, n, result) == 0);
        // Out of place every output starts wrong, so a collective that never wrote shows.
        if (!in_place) CHECK(count_wrong(op, n, ranks[n - 1]) == c);
      }
    }
  }
}

TEST_CASE("find_collective_op lists the valid names for a wrong one") {
  CHECK_THROWS_WITH_AS(find_collective_op("reduce"),
                       doctest::Contains("allreduce, broadcast, allgather"), ConfigError);
}

TEST_CASE("a rank that does nothing is counted wrong on every element, in both forms") {
  SweepSpec spec;
  spec.op = &find_collective_op("allreduce");
  spec.ranks = 3;
  spec.sizes = {4096, 8192};
  spec.warmup = 0;
  spec.iters = 2;
  std::vector<RowResult> rows;
  sweep_threads(
      spec,
      [](int, Store&) {
        std::vector<BackendRank> ranks;
        ranks.push_back({"idle", std::make_unique<IdleRank>()});
        return ranks;
      },
      [&](const RowResult& row) { rows.push_back(row); });
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].backend == "idle");
  CHECK(rows[0].out_of_place.wrong == 3 * 1024);
  // In place the input is the output, which a rank doing nothing leaves at its own data.
  CHECK(rows[0].in_place.wrong == 3 * 1024);
  CHECK(rows[1].out_of_place.wrong == 3 * 2048);
  CHECK(rows[1].in_place.iters == 2);
}

TEST_CASE("auto iterations follow the slowest rank's median warm-up call, not one slow call") {
  SweepSpec spec;
  spec.op = &find_collective_op("allreduce");
  spec.ranks = 2;
  spec.sizes = {4096};
  spec.warmup = 3;
  spec.iters = 0;
  spec.seconds = 0.2;
  std::vector<RowResult> rows;
  // Rank 0's calls take 5 ms but its second and fourth 400 ms (as a page fault storm or a late
  // peer can make one call); rank 1's every call 20 ms. The slowest rank's median is rank 1's
  // 20 ms: 0.2 s / 20 ms = 10 iterations (fewer where sleeps overrun). Had one call after the
  // warm-up (the fourth) set them, or the warm-up's mean, they would be 5.
  sweep_threads(
      spec,
      [](int rank, Store&) {
        using std::chrono::milliseconds;
        std::vector<BackendRank> ranks;
        ranks.push_back({"sleep", rank == 0 ? std::make_unique<SleepingRank>(
                                                  std::vector<int>{1, 3}, milliseconds(400),
                                                  milliseconds(5))
                                            : std::make_unique<SleepingRank>(
                                                  std::vector<int>{}, milliseconds(20),
                                                  milliseconds(20))});
        return ranks;
      },
      [&](const RowResult& row) { rows.push_back(row); });
  REQUIRE(rows.size() == 1);
  for (const Measurement& m : {rows[0].out_of_place, rows[0].in_place}) {
    CHECK(m.iters >= 7);
    CHECK(m.iters <= 10);
  }
}

TEST_CASE("a failing rank fails the sweep instead of hanging it") {
  SweepSpec spec;
  spec.op = &find_collective_op("allreduce");
  spec.ranks = 2;
  spec.sizes = {4096};
  spec.iters = 0;  // auto: the other rank waits for the probe times and must be woken
  spec.timeout = std::chrono::milliseconds(20000);
  auto connect = [](int rank, Store&) {
    if (rank == 1) throw PeerError(1, "127.0.0.1", "connect", "refused");
    std::vector<BackendRank> ranks;
    ranks.push_back({"idle", std::make_unique<IdleRank>()});
    return ranks;
  };
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(sweep_threads(spec, connect, [](const RowResult&) {}),
                       doctest::Contains("refused"), PeerError);
  // Woken by the failure, not released by the 20 s timeout.
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
}

TEST_CASE("invalid options are rejected before anything runs") {
  auto options = tiny(2, "allreduce");
  options.factor = 1;
  CHECK_THROWS_AS(run_collective_bench(options), ConfigError);
  options = tiny(0, "allreduce");
  CHECK_THROWS_AS(run_collective_bench(options), ConfigError);
  options = tiny(2, "alltoall");
  CHECK_THROWS_AS(run_collective_bench(options), ConfigError);
  options = tiny(2, "allreduce");
  options.max_bytes = 1024;
  CHECK_THROWS_AS(run_collective_bench(options), ConfigError);
  options = tiny(2, "allreduce");
  options.ranks_as = "processes";  // needs the executable started per rank
  CHECK_THROWS_AS(run_collective_bench(options), ConfigError);
}

TEST_CASE("backends: defaults, unknown names, a backend not built, mpi without mpirun") {
  auto options = tiny(2, "allreduce");
  const CollectiveBenchOptions resolved = resolve_backends(options);
  CHECK(resolved.backends == default_backends());
  CHECK(resolved.ranks_as == "threads");
  options.backends = {"tcp", "ucx"};
  CHECK_THROWS_WITH_AS(
      resolve_backends(options),
      doctest::Contains("--backend: unknown backend 'ucx' (valid: tcp, shm, gloo, mpi)"),
      ConfigError);
  options.backends = {"tcp", "tcp"};
  CHECK_THROWS_WITH_AS(resolve_backends(options), doctest::Contains("named twice"), ConfigError);
  options.backends = {"nccl"};
  CHECK_THROWS_WITH_AS(resolve_backends(options), doctest::Contains("--device gpu"), ConfigError);
  for (const auto& [backend, package] :
       {std::pair<std::string, std::string>{"gloo", "libgloo-dev"}, {"mpi", "libopenmpi-dev"}}) {
    options.backends = {backend};
    const auto built = compiled_backends();
    if (std::find(built.begin(), built.end(), backend) != built.end()) continue;
    CHECK_THROWS_WITH_AS(resolve_backends(options), doctest::Contains(package.c_str()),
                         ConfigError);
  }
  const auto built = compiled_backends();
  if (std::find(built.begin(), built.end(), "mpi") != built.end()) {
    options.backends = {"tcp", "mpi"};
    CHECK(resolve_backends(options).ranks_as == "mpirun");
    options.ranks_as = "threads";
    CHECK_THROWS_WITH_AS(resolve_backends(options), doctest::Contains("mpirun"), ConfigError);
  }
}

TEST_CASE("a tiny allreduce sweep: each size every backend in turn, nothing wrong") {
  for (int n : {2, 4}) {
    CAPTURE(n);
    std::string streamed;
    const CollectiveBenchReport report = run_collective_bench_report(
        tiny(n, "allreduce"), [&](const std::string& piece) { streamed += piece; });
    CHECK(report.wrong == 0);  // what `gradsync bench allreduce` exits 1 on
    const std::string& table = report.text;
    CAPTURE(table);
    CHECK(streamed == table);
    CHECK(table.find("# nRanks " + std::to_string(n) + " (threads") != std::string::npos);
    CHECK(table.find("# Avg bus bandwidth") != std::string::npos);
    const auto rows = data_rows(table);
    const auto backends = default_backends();
    REQUIRE(rows.size() == 3 * backends.size());
    const double factor = 2.0 * (n - 1) / n;
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const auto& row = rows[r];
      const std::size_t expected_bytes = std::size_t{4096} << (r / backends.size());
      REQUIRE(row.size() == 14);
      CHECK(row[0] == backends[r % backends.size()]);
      CHECK(row[1] == std::to_string(expected_bytes));
      CHECK(row[2] == std::to_string(expected_bytes / 4));
      CHECK(row[3] == "float");
      CHECK(row[4] == "sum");
      CHECK(row[5] == "-1");
      for (std::size_t form : {6, 10}) {
        CHECK(row[form + 3] == "0");
        const double algbw = std::stod(row[form + 1]);
        const double busbw = std::stod(row[form + 2]);
        // Both are printed to 0.01; the factor scales algbw's rounding error.
        CHECK(std::abs(busbw - algbw * factor) <= 0.005 * factor + 0.005 + 1e-9);
      }
    }
  }
}

TEST_CASE("broadcast and allgather with a rank count that divides nothing") {
  for (const char* op : {"broadcast", "allgather"}) {
    CAPTURE(op);
    auto options = tiny(3, op);
    options.backends = {"tcp"};
    const auto rows = data_rows(run_collective_bench(options));
    REQUIRE(rows.size() == 3);
    for (const auto& row : rows) {
      REQUIRE(row.size() == 14);
      CHECK(row[0] == "tcp");
      CHECK(row[4] == "none");
      CHECK(row[5] == (std::string(op) == "broadcast" ? "0" : "-1"));
      CHECK(row[9] == "0");
      CHECK(row[13] == "0");
    }
  }
}

TEST_CASE("JSON output is one document with a result per backend and size") {
  auto options = tiny(2, "allreduce");
  options.json = true;
  const auto doc = nlohmann::json::parse(run_collective_bench(options));
  CHECK(doc["parameters"]["ranks"] == 2);
  CHECK(doc["parameters"]["op"] == "allreduce");
  const auto backends = default_backends();
  REQUIRE(doc["results"].size() == 3 * backends.size());
  for (const auto& row : doc["results"]) {
    CHECK(row["out_of_place"]["nwrong"] == 0);
    CHECK(row["in_place"]["nwrong"] == 0);
    CHECK(row["in_place"]["bus_bw"].is_number());
  }
  CHECK(doc["results"].back()["size"] == 16384);
  CHECK(doc["results"].back()["backend"] == backends.back());
  CHECK(doc["out_of_bounds"]["okay"] == true);
  CHECK(doc["average_bus_bandwidth"].size() == backends.size());
}

TEST_CASE("nccl_float fits nccl-tests' widths, losing decimals before overflowing") {
  CHECK(nccl_float(12.345, 7) == "  12.35");
  CHECK(nccl_float(12345.678, 7) == "12345.7");
  CHECK(nccl_float(1234567.8, 7) == "1234568");
  CHECK(nccl_float(123456789.0, 7) == "1.2e+08");
  CHECK(nccl_float(1.5, 6) == "  1.50");
}

}  // namespace gradsync
