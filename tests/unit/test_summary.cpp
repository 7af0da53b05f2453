// summarize(): the run's step breakdown is what a step costs, not what rank 0's evaluations
// and checkpoints cost the ranks that waited for them.
#include <doctest/doctest.h>

#include <vector>

#include "tests/support/training.h"
#include "worker/in_process.h"
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
}
