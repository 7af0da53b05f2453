#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "bench/collective_bench.h"
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
  void run(RankBuffers&) override {}
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
      for (int r = 0; r < n; ++r) op.init(r, n, c, ranks[r]);
      RankBuffers result;
      result.out.assign(c, 0.0f);
      const std::size_t part = c / static_cast<std::size_t>(n);
      for (std::size_t i = 0; i < c; ++i) {
        if (op.name == "allreduce") {
          for (int r = 0; r < n; ++r) result.out[i] += ranks[r].out[i];
        } else if (op.name == "broadcast") {
          result.out[i] = ranks[0].out[i];
        } else {
          result.out[i] = ranks[i / part].in[i % part];
        }
      }
      CHECK(count_wrong(op, n, result) == 0);
    }
  }
}

TEST_CASE("find_collective_op lists the valid names for a wrong one") {
  CHECK_THROWS_WITH_AS(find_collective_op("reduce"),
                       doctest::Contains("allreduce, broadcast, allgather"), ConfigError);
}

TEST_CASE("a rank that does nothing is counted wrong on every element") {
  SweepSpec spec;
  spec.op = &find_collective_op("allreduce");
  spec.ranks = 3;
  spec.sizes = {4096, 8192};
  spec.warmup = 0;
  spec.iters = 2;
  const auto rows = measure_sweep(spec, [](int) { return std::make_unique<IdleRank>(); });
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].wrong == 3 * 1024);
  CHECK(rows[1].wrong == 3 * 2048);
  CHECK(rows[1].iters == 2);
}

TEST_CASE("a failing rank fails the sweep instead of hanging it") {
  SweepSpec spec;
  spec.op = &find_collective_op("allreduce");
  spec.ranks = 2;
  spec.sizes = {4096};
  spec.iters = 0;  // auto: the other rank waits in the in-process barrier and must be woken
  spec.timeout = std::chrono::milliseconds(20000);
  auto connect = [](int rank) -> std::unique_ptr<BenchRank> {
    if (rank == 1) throw PeerError(1, "127.0.0.1", "connect", "refused");
    return std::make_unique<IdleRank>();
  };
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(measure_sweep(spec, connect), doctest::Contains("refused"), PeerError);
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
}

TEST_CASE("a tiny allreduce sweep over TcpRing: 3 rows, nothing wrong, busbw from algbw") {
  for (int n : {2, 4}) {
    CAPTURE(n);
    const CollectiveBenchReport report = run_collective_bench_report(tiny(n, "allreduce"));
    CHECK(report.wrong == 0);  // what `gradsync bench allreduce` exits 1 on
    CHECK(report.gloo_wrong == 0);
    const std::string& table = report.text;
    CAPTURE(table);
    CHECK(table.find("op allreduce") != std::string::npos);
    CHECK(table.find("ranks " + std::to_string(n) + " ") != std::string::npos);
    const auto rows = data_rows(table);
    REQUIRE(rows.size() == 3);
    const double factor = 2.0 * (n - 1) / n;
    std::size_t expected_bytes = 4096;
    for (const auto& row : rows) {
      REQUIRE(row.size() >= 7);
      CHECK(row[0] == std::to_string(expected_bytes));
      CHECK(row[1] == std::to_string(expected_bytes / 4));
      CHECK(row[2] == "float");
      CHECK(row[6] == "0");
      const double algbw = std::stod(row[4]);
      const double busbw = std::stod(row[5]);
      // Both are printed to 0.01; the factor scales algbw's rounding error.
      CHECK(std::abs(busbw - algbw * factor) <= 0.005 * factor + 0.005 + 1e-9);
      if (gloo_compiled_in()) {
        REQUIRE(row.size() == 11);
        CHECK(row[9] == "0");  // gloo #wrong
      } else {
        CHECK(row.size() == 7);
      }
      expected_bytes *= 2;
    }
  }
}

TEST_CASE("broadcast and allgather over TcpRing with a rank count that divides nothing") {
  for (const char* op : {"broadcast", "allgather"}) {
    CAPTURE(op);
    auto options = tiny(3, op);
    options.gloo = false;
    const auto rows = data_rows(run_collective_bench(options));
    REQUIRE(rows.size() == 3);
    for (const auto& row : rows) {
      REQUIRE(row.size() == 7);  // --no-gloo: no Gloo columns
      CHECK(row[6] == "0");
    }
  }
}

TEST_CASE("JSON output is one object per size") {
  auto options = tiny(2, "allreduce");
  options.json = true;
  options.gloo = false;
  const auto lines = split_lines(run_collective_bench(options));
  REQUIRE(lines.size() == 3);
  for (const auto& line : lines) {
    CHECK(line.front() == '{');
    CHECK(line.back() == '}');
    CHECK(line.find("\"wrong\": 0") != std::string::npos);
    CHECK(line.find("gloo") == std::string::npos);
  }
  CHECK(lines[2].find("\"size_bytes\": 16384") != std::string::npos);
}

}  // namespace gradsync
