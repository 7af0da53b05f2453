#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <string>

#include "common/error.h"
#include "tests/support/temp_dir.h"
#include "worker/rank_outputs.h"

namespace gradsync {
namespace {

using gradsync::testing::TempDir;

LoopResult some_result() {
  LoopResult r;
  r.steps = 468;
  r.train_seconds = 2.5;
  r.final_loss = 0.25;
  r.parameters = 269322;
  r.totals.compute_s = 0.5;
  r.totals.communicate_s = 1.5;
  r.totals.wait_s = 0.125;
  r.totals.bytes_sent = 1077432;
  r.totals.bytes_received = 2154864;
  r.evals = {{100, 0.5, 0.75, 0.5}, {468, 2.5, 0.5, 0.8}};
  return r;
}

}  // namespace

TEST_CASE("rank results: what a rank writes, the launcher reads back") {
  TempDir dir;
  const std::string path = rank_result_path(dir.path().string(), 3);
  CHECK(path.ends_with("rank3.json"));
  const LoopResult written = some_result();
  write_rank_result(path, written);
  const LoopResult read = read_rank_result(path);
  CHECK(read.steps == written.steps);
  CHECK(read.train_seconds == written.train_seconds);
  CHECK(read.final_loss == written.final_loss);
  CHECK(read.parameters == written.parameters);
  CHECK(read.totals.compute_s == written.totals.compute_s);
  CHECK(read.totals.communicate_s == written.totals.communicate_s);
  CHECK(read.totals.wait_s == written.totals.wait_s);
  CHECK(read.totals.bytes_sent == written.totals.bytes_sent);
  CHECK(read.totals.bytes_received == written.totals.bytes_received);
  REQUIRE(read.evals.size() == 2);
  CHECK(read.evals[1].step == 468);
  CHECK(read.evals[1].test_loss == 0.5);
  CHECK(read.evals[1].test_accuracy == 0.8);
}

TEST_CASE("rank results: a run that diverged (NaN loss) still reports") {
  // JSON has no NaN; the writer stores null, and the reader must take it back as NaN instead
  // of failing the whole run at the end (async with momentum 0.9 diverges: the run is the
  // lesson, its result must arrive).
  TempDir dir;
  const std::string path = rank_result_path(dir.path().string(), 0);
  LoopResult diverged = some_result();
  diverged.final_loss = std::numeric_limits<double>::quiet_NaN();
  diverged.evals[1].test_loss = std::numeric_limits<double>::quiet_NaN();
  diverged.evals[1].test_accuracy = 0.1;
  write_rank_result(path, diverged);
  const LoopResult read = read_rank_result(path);
  CHECK(std::isnan(read.final_loss));
  REQUIRE(read.evals.size() == 2);
  CHECK(read.evals[0].test_loss == 0.75);
  CHECK(std::isnan(read.evals[1].test_loss));
  CHECK(read.evals[1].test_accuracy == 0.1);
}

TEST_CASE("rank results: a missing or malformed file is an error naming it") {
  TempDir dir;
  const std::string path = rank_result_path(dir.path().string(), 1);
  CHECK_THROWS_WITH_AS(read_rank_result(path), doctest::Contains(path.c_str()), Error);
  std::ofstream(path) << R"({"steps": 3})";  // fields missing
  CHECK_THROWS_WITH_AS(read_rank_result(path), doctest::Contains("rank1.json: malformed"), Error);
  std::ofstream(path) << R"({"steps": "three")";  // not JSON
  CHECK_THROWS_WITH_AS(read_rank_result(path), doctest::Contains("rank1.json: malformed"), Error);
}

}  // namespace gradsync
