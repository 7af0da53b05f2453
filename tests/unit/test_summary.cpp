// summarize(): the run's step breakdown is what a step costs, not what rank 0's evaluations
// and checkpoints cost the ranks that waited for them.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "tests/support/temp_dir.h"
#include "tests/support/training.h"
#include "worker/in_process.h"
#include "worker/rank_outputs.h"
#include "worker/summary.h"

namespace {

gradsync::LoopResult rank(double communicate_s, double wait_s, double between_steps_s) {
  gradsync::LoopResult r;
  r.steps = 10;
  r.train_seconds = 1.0;
  r.totals.compute_s = 0.5;
  r.totals.communicate_s = communicate_s;
  r.totals.wait_s = wait_s;
  r.between_steps_s = between_steps_s;
  return r;
}

// A two-rank run of `strategy`, as summarize() reads it.
gradsync::Config two_ranks(const std::string& strategy) {
  gradsync::Config config;
  config.strategy = strategy;
  config.workers = 2;
  return config;
}

}  // namespace

TEST_CASE("summary: synchronous ranks do not count rank 0's evaluations as their communication") {
  gradsync::Config config = two_ranks("allreduce");
  // Rank 0 evaluated for 0.4 s between steps; rank 1 waited it out inside its next steps.
  const std::vector<gradsync::LoopResult> ranks = {rank(0.1, 0.0, 0.4), rank(0.5, 0.05, 0.0)};
  const gradsync::RunSummary s = gradsync::summarize(config, 1000, ranks);
  // Rank 1: 0.05 s of wait and 0.35 s of communication were rank 0's evaluation.
  CHECK(s.mean_step.communicate_s == doctest::Approx((0.1 + 0.15) / 20));
  CHECK(s.mean_step.wait_s == doctest::Approx(0.0));
  CHECK(s.mean_step.compute_s == doctest::Approx(1.0 / 20));

  // ps async: workers do not wait for each other step by step; nothing is taken out.
  config.strategy = "ps";
  config.ps.mode = "async";
  const gradsync::RunSummary async = gradsync::summarize(config, 1000, ranks);
  CHECK(async.mean_step.communicate_s == doctest::Approx((0.1 + 0.5) / 20));
  CHECK(async.mean_step.wait_s == doctest::Approx(0.05 / 20));
}

TEST_CASE("summary: a rank never gets less than nothing") {
  const gradsync::Config config = two_ranks("dp");
  // Replica 1 spent less blocked time than replica 0's checkpoints took (it computed meanwhile).
  const std::vector<gradsync::LoopResult> ranks = {rank(0.1, 0.0, 0.4), rank(0.05, 0.1, 0.0)};
  const gradsync::RunSummary s = gradsync::summarize(config, 1000, ranks);
  CHECK(s.mean_step.communicate_s == doctest::Approx(0.1 / 20));
  CHECK(s.mean_step.wait_s == doctest::Approx(0.0));
}

TEST_CASE("summary: only evaluations that a later step waits for count as between steps") {
  // The evaluation after the last step delays no one: the other ranks are done. Counting it
  // would erase their real communication from the summary.
  gradsync::Config config = two_ranks("dp");
  config.train.batch = 8;
  config.model.hidden = {16};
  gradsync::LoopOptions loop;
  loop.steps = 3;
  const auto final_only =
      gradsync::train_in_process(config, gradsync::testing::synthetic_data(), loop, {}, {});
  CHECK(final_only[0].evals.size() == 1);
  CHECK(final_only[0].between_steps_s == 0.0);
  loop.eval_every = 1;  // after steps 1 and 2 as well: those the next step waits for
  const auto every_step =
      gradsync::train_in_process(config, gradsync::testing::synthetic_data(), loop, {}, {});
  CHECK(every_step[0].evals.size() == 3);
  CHECK(every_step[0].between_steps_s > 0.0);
}

TEST_CASE(
    "summary: step time percentiles per rank by the nearest-rank rule, the slowest in the table") {
  const gradsync::Config config = two_ranks("allreduce");
  std::vector<gradsync::LoopResult> ranks(2);
  for (int i = 1; i <= 100; ++i) {
    ranks[0].step_seconds.push_back(0.001f * float(i));        // 1..100 ms
    ranks[1].step_seconds.push_back(0.002f * float(101 - i));  // 200..2 ms, reversed
  }
  ranks[0].steps = ranks[1].steps = 100;
  const gradsync::RunSummary s = gradsync::summarize(config, 1000, ranks, {}, {0, 3});
  REQUIRE(s.step_time.size() == 2);
  CHECK(s.step_time[0].rank == 0);
  CHECK(s.step_time[0].p50 == doctest::Approx(0.050));
  CHECK(s.step_time[0].p90 == doctest::Approx(0.090));
  CHECK(s.step_time[0].p99 == doctest::Approx(0.099));
  CHECK(s.step_time[0].max == doctest::Approx(0.100));
  CHECK(s.step_time[1].rank == 3);
  CHECK(s.step_time[1].p99 == doctest::Approx(0.198));
  const std::string table = gradsync::comparison_table({s});
  CHECK(table.find("| p99 step |") != std::string::npos);
  CHECK(table.find("| 198.00 ms (rank 3) |") != std::string::npos);
  REQUIRE(s.slowest.has_value());
  CHECK(s.slowest->rank == 3);
  CHECK(table.find("\nslowest rank of " + s.run +
                   ": rank 3, p99 step 198.00 ms against 99.00 ms "
                   "(the others' median p99), 2.00x\n") != std::string::npos);
}

TEST_CASE("summary: the slowest rank has the highest p99, against the others' median") {
  using gradsync::StepPercentiles;
  auto p99s = [](std::vector<double> values) {
    std::vector<StepPercentiles> ranks;
    for (std::size_t r = 0; r < values.size(); ++r) {
      ranks.push_back({.rank = int(r) * 2, .p99 = values[r]});  // ranks 0, 2, 4...: not positions
    }
    return ranks;
  };
  // One rank is nobody's straggler.
  CHECK_FALSE(gradsync::slowest_rank({}).has_value());
  CHECK_FALSE(gradsync::slowest_rank(p99s({0.5})).has_value());
  // Two: the other's p99 is the median.
  auto two = gradsync::slowest_rank(p99s({0.010, 0.030}));
  REQUIRE(two.has_value());
  CHECK(two->rank == 2);
  CHECK(two->p99 == doctest::Approx(0.030));
  CHECK(two->others_median_p99 == doctest::Approx(0.010));
  // Four: three others, the middle one; the slowest need not be last.
  auto four = gradsync::slowest_rank(p99s({0.012, 0.090, 0.010, 0.020}));
  REQUIRE(four.has_value());
  CHECK(four->rank == 2);
  CHECK(four->others_median_p99 == doctest::Approx(0.012));
  // Five: four others, the mean of the middle two.
  auto five = gradsync::slowest_rank(p99s({0.01, 0.02, 0.03, 0.04, 0.5}));
  REQUIRE(five.has_value());
  CHECK(five->rank == 8);
  CHECK(five->others_median_p99 == doctest::Approx(0.025));
  // A tie goes to the first in rank order; the one it tied with counts among the others.
  auto tie = gradsync::slowest_rank(p99s({0.02, 0.05, 0.05}));
  REQUIRE(tie.has_value());
  CHECK(tie->rank == 2);
  CHECK(tie->others_median_p99 == doctest::Approx(0.035));
  // A run of one rank: its p99 in the table, no rank named, no line below.
  gradsync::Config one;
  std::vector<gradsync::LoopResult> lone(1);
  lone[0].step_seconds = {0.004f};
  lone[0].steps = 1;
  const gradsync::RunSummary s = gradsync::summarize(one, 10, lone);
  CHECK_FALSE(s.slowest.has_value());
  const std::string table = gradsync::comparison_table({s});
  CHECK(table.find("| 4.00 ms |") != std::string::npos);
  CHECK(table.find("slowest rank") == std::string::npos);
}

TEST_CASE("summary: peak model-state bytes are the most any rank held, in summary.json and table") {
  gradsync::Config config = two_ranks("allreduce");
  config.name = "zero-2";
  std::vector<gradsync::LoopResult> ranks(2);
  ranks[0].peak_model_state_bytes = 3'000'000;
  ranks[0].peak_params_bytes = 1'000'000;
  ranks[0].peak_grads_bytes = 1'500'000;
  ranks[0].peak_optimizer_bytes = 500'000;
  ranks[1].peak_model_state_bytes = 3'500'000;
  ranks[1].peak_params_bytes = 1'000'000;
  ranks[1].peak_grads_bytes = 1'000'000;
  ranks[1].peak_optimizer_bytes = 1'500'000;

  // Through the rank files, as the launcher folds a multi-process run.
  gradsync::testing::TempDir dir;
  for (int r = 0; r < 2; ++r) {
    gradsync::write_rank_result(gradsync::rank_result_path(dir.path().string(), r), ranks[r]);
  }
  const gradsync::RunSummary s = gradsync::fold_rank_outputs(config, dir.path().string());
  CHECK(s.peak_model_state_bytes == 3'500'000);  // rank 1's
  CHECK(s.peak_params_bytes == 1'000'000);
  CHECK(s.peak_grads_bytes == 1'500'000);  // rank 0's: each kind its own max
  CHECK(s.peak_optimizer_bytes == 1'500'000);
  std::ifstream in(dir.path() / "summary.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  CHECK(j.at("peak_model_state_bytes") == 3'500'000);
  CHECK(j.at("peak_model_state_bytes_by_kind").at("params") == 1'000'000);
  CHECK(j.at("peak_model_state_bytes_by_kind").at("grads") == 1'500'000);
  CHECK(j.at("peak_model_state_bytes_by_kind").at("optimizer") == 1'500'000);

  // MB per rank in the table's last column; "-" where a run did not measure it.
  gradsync::RunSummary unmeasured = s;
  unmeasured.run = "old";
  unmeasured.peak_model_state_bytes = 0;
  gradsync::RunSummary big = s;
  big.run = "big";
  big.peak_model_state_bytes = 307'200'000;
  const std::string table = gradsync::comparison_table({s, unmeasured, big});
  CHECK(table.find("| p99 step | peak model-state MB/rank |\n") != std::string::npos);
  CHECK(table.find(" | 3.5 |\n") != std::string::npos);
  CHECK(table.find(" | - |\n") != std::string::npos);
  CHECK(table.find(" | 307 |\n") != std::string::npos);
  CHECK(table.find("peak model state of") == std::string::npos);
}

TEST_CASE("summary: dp's peak model state is its process's, all replicas, and the table says so") {
  gradsync::Config config = two_ranks("dp");
  config.name = "dp-2";
  config.train.batch = 8;
  config.model.hidden = {16};
  gradsync::LoopOptions loop;
  loop.steps = 2;
  loop.evaluate = false;
  const auto results =
      gradsync::train_in_process(config, gradsync::testing::synthetic_data(), loop, {}, {});
  const gradsync::RunSummary s = gradsync::summarize(config, 698, results);
  // Two replicas' parameters and gradients and replica 0's optimizer state, at least (the
  // process may hold more model state than this run's: the ledger counts what is alive).
  CHECK(s.peak_model_state_bytes >= 5 * 4 * 698);
  CHECK(s.peak_model_state_bytes == results[0].peak_model_state_bytes);
  const std::string table = gradsync::comparison_table({s});
  CHECK(table.find("\npeak model state of dp-2: the one process's, all 2 replicas together\n") !=
        std::string::npos);
}
