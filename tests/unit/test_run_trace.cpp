// run_experiment's trace.json: every span of every traced step is kept, including the steps
// that also checkpoint and evaluate (the busiest steps a trace has), and a run that fails
// still writes what it recorded.
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"
#include "experiments/run_experiment.h"
#include "tests/support/temp_dir.h"
#include "tests/support/training.h"

namespace {

// dp over two replicas on the synthetic data, quiet.
gradsync::Config dp2(std::int64_t steps, std::vector<int> hidden) {
  gradsync::Config config;
  config.name = "dp-2";
  config.strategy = "dp";
  config.workers = 2;
  config.train.batch = 8;
  config.train.steps = steps;
  config.model.hidden = std::move(hidden);
  config.output.progress = "off";
  return config;
}

nlohmann::json read_trace(const std::string& run_dir) {
  std::ifstream in(run_dir + "/trace.json");
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("run trace: a step that checkpoints and evaluates keeps all four of its spans") {
  gradsync::testing::TempDir dir;
  gradsync::Config config = dp2(4, {16});
  config.train.eval_every = 1;
  config.checkpoint.every = 1;
  config.output.trace_steps = 4;
  const std::string run_dir = dir.file("run");
  gradsync::run_experiment(config, gradsync::testing::synthetic_data(), run_dir);

  const nlohmann::json trace = read_trace(run_dir);
  std::map<std::string, int> rank0;  // span name -> count on rank 0's compute track
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] == "X" && event["pid"] == 0 && event["tid"] == 0) {
      ++rank0[event["name"].get<std::string>()];
    }
  }
  CHECK(rank0["compute"] == 4);
  CHECK(rank0["synchronize"] == 4);
  CHECK(rank0["checkpoint"] == 4);
  CHECK(rank0["evaluate"] == 4);
  CHECK(trace["otherData"]["dropped_spans"] == 0);
}

TEST_CASE("run trace: an in-process run that fails still writes its trace") {
  // dp whose replica 1 gives up on replica 0, busy on a slow emulated link (as in
  // test_dp_strategy.cpp): the run throws, and trace.json is there beside metrics.csv.
  gradsync::testing::TempDir dir;
  gradsync::Config config = dp2(3, {512, 512});
  config.comm.timeout_s = 0.2;
  config.network.link_gbps = 0.01;
  const std::string run_dir = dir.file("run");
  CHECK_THROWS_AS(gradsync::run_experiment(config, gradsync::testing::synthetic_data(), run_dir),
                  gradsync::TimeoutError);
  CHECK(read_trace(run_dir).contains("traceEvents"));
}
