// gradsync sweep: the grid a preset expands to, scaling efficiency against the right baseline,
// and sweep.csv with exactly the columns the plot script reads.
#include <doctest/doctest.h>

#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "experiments/preset.h"
#include "experiments/sweep.h"

namespace {

using gradsync::Config;
using gradsync::RunSummary;

const char* kPreset = R"(
strategy: allreduce
data: {kind: synthetic}
model: {kind: synthetic, parameters: 1000, compute_ms: 1}
sweep: {workers: [1, 2, 4]}
runs:
  - {name: single, strategy: single}
  - {name: ring}
  - {name: ps-k2, strategy: ps, ps: {servers: 2}}
)";

RunSummary summary(const Config& c, double samples_per_s) {
  RunSummary s;
  s.run = c.name;
  s.strategy = c.strategy;
  s.workers = c.workers;
  s.steps = 10;
  s.parameters = 1000;
  s.samples_per_s = samples_per_s;
  s.busiest_bytes = 8000 * static_cast<std::uint64_t>(c.workers);
  s.busiest_node = "rank 0";
  s.mean_step = {0.03, 0.01, 0.0, 0, 0, 0};
  return s;
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> fields;
  std::stringstream in(line);
  for (std::string f; std::getline(in, f, ',');) fields.push_back(f);
  if (!line.empty() && line.back() == ',') fields.emplace_back();
  return fields;
}

}  // namespace

TEST_CASE("sweep: each run at each N, single once, named <run>-n<N>") {
  const auto preset = gradsync::load_preset_text(kPreset, "grid.yaml", {});
  const std::vector<Config> grid = gradsync::expand_sweep(preset);
  std::vector<std::string> names;
  for (const Config& c : grid) names.push_back(c.name + "/" + std::to_string(c.workers));
  CHECK(names == std::vector<std::string>{"single/1", "ring-n1/1", "ring-n2/2", "ring-n4/4",
                                          "ps-k2-n1/1", "ps-k2-n2/2", "ps-k2-n4/4"});
}

TEST_CASE("sweep: a preset without sweep.workers is refused, naming the key") {
  auto preset = gradsync::load_preset_text("strategy: dp\nworkers: 2\n", "plain.yaml", {});
  try {
    gradsync::expand_sweep(preset);
    FAIL("expected a ConfigError");
  } catch (const gradsync::ConfigError& e) {
    CHECK(std::string(e.what()).find("sweep.workers") != std::string::npos);
  }
}

TEST_CASE("sweep: scaling efficiency per worker against the series' N = 1") {
  const auto preset = gradsync::load_preset_text(kPreset, "grid.yaml", {});
  const std::vector<Config> grid = gradsync::expand_sweep(preset);
  // single 1000; ring 1000, 1800, 3200; ps 900, 1800, 2700.
  const double rates[] = {1000, 1000, 1800, 3200, 900, 1800, 2700};
  std::vector<RunSummary> summaries;
  for (std::size_t i = 0; i < grid.size(); ++i) summaries.push_back(summary(grid[i], rates[i]));
  const auto rows = gradsync::sweep_rows(grid, summaries);
  REQUIRE(rows.size() == 7);
  CHECK(*rows[2].scaling_efficiency == doctest::Approx(0.9));   // 1800 / (2 * 1000)
  CHECK(*rows[3].scaling_efficiency == doctest::Approx(0.8));   // 3200 / (4 * 1000)
  CHECK(*rows[6].scaling_efficiency == doctest::Approx(0.75));  // 2700 / (4 * 900)

  const std::string csv = gradsync::sweep_csv(rows);
  std::stringstream in(csv);
  std::string header;
  std::getline(in, header);
  CHECK(header == gradsync::kSweepColumns);
  const std::size_t columns = split(header).size();
  int lines = 0;
  for (std::string line; std::getline(in, line); ++lines) {
    CHECK(split(line).size() == columns);
  }
  CHECK(lines == 7);
  CHECK(csv.find("ps-k2-n4,ps,4,2,sync,0,1000,") != std::string::npos);
  CHECK(gradsync::sweep_markdown(rows).find("| ps sync K=2 | 4 | 2700 | 75% |") !=
        std::string::npos);
}

TEST_CASE("sweep: a series without N = 1 scales against the single run") {
  auto preset = gradsync::load_preset_text(kPreset, "grid.yaml", {"sweep.workers=[2, 4]"});
  const std::vector<Config> grid = gradsync::expand_sweep(preset);
  REQUIRE(grid.size() == 5);  // single, ring 2 and 4, ps 2 and 4
  std::vector<RunSummary> summaries;
  for (const Config& c : grid) summaries.push_back(summary(c, 500.0 * c.workers));
  const auto rows = gradsync::sweep_rows(grid, summaries);
  CHECK(*rows[1].scaling_efficiency == doctest::Approx(1.0));  // 1000 / (2 * 500)
}

TEST_CASE("sweep: runs of one strategy that differ in a setting are separate series") {
  // Two allreduce runs, with and without overlap: each scales against its own N = 1, not
  // against whichever ran fastest.
  const char* preset_text = R"(
strategy: allreduce
data: {kind: synthetic}
model: {kind: synthetic, parameters: 1000, compute_ms: 1}
sweep: {workers: [1, 2]}
runs:
  - {name: overlap}
  - {name: no-overlap, comm: {overlap: false}}
)";
  const auto preset = gradsync::load_preset_text(preset_text, "grid.yaml", {});
  const std::vector<Config> grid = gradsync::expand_sweep(preset);
  REQUIRE(grid.size() == 4);
  const double rates[] = {1000, 1800, 500, 800};  // overlap 1, 2; no-overlap 1, 2
  std::vector<RunSummary> summaries;
  for (std::size_t i = 0; i < grid.size(); ++i) summaries.push_back(summary(grid[i], rates[i]));
  const auto rows = gradsync::sweep_rows(grid, summaries);
  CHECK(*rows[1].scaling_efficiency == doctest::Approx(0.9));  // 1800 / (2 * 1000)
  CHECK(*rows[3].scaling_efficiency == doctest::Approx(0.8));  // 800 / (2 * 500), not / 1000
  const std::string csv = gradsync::sweep_csv(rows);
  CHECK(csv.find(",no-overlap\n") != std::string::npos);  // the series column, for the plots
}

TEST_CASE("sweep: two grid points with one name are refused before anything runs") {
  for (const char* override_text : {"sweep.workers=[2, 2]", ""}) {
    CAPTURE(override_text);
    std::vector<std::string> overrides;
    if (*override_text) overrides.push_back(override_text);
    // Without the override: run `ring` at N = 2 and a run named `ring-n2` at N = 1.
    const char* text = *override_text ? kPreset : R"(
strategy: allreduce
data: {kind: synthetic}
model: {kind: synthetic, parameters: 1000, compute_ms: 1}
runs:
  - {name: ring, sweep: {workers: [2]}}
  - {name: ring-n2, sweep: {workers: [1]}, strategy: single}
)";
    const auto preset = gradsync::load_preset_text(text, "grid.yaml", overrides);
    try {
      gradsync::expand_sweep(preset);
      FAIL("a grid with one name twice must be refused");
    } catch (const gradsync::ConfigError& e) {
      CHECK(std::string(e.what()).find("grid.yaml: sweep.workers: two grid points are both "
                                       "named `") != std::string::npos);
    }
  }
}
