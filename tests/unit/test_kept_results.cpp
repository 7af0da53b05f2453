#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include "common/config.h"
#include "experiments/kept_results.h"
#include "tests/support/temp_dir.h"

TEST_CASE("kept results: a failed run's folder is described by what can be used") {
  gradsync::testing::TempDir dir;
  gradsync::Config config;
  config.name = "ring";
  const std::string run = dir.path().string();
  CHECK(gradsync::kept_results(config, run) ==
        "kept in " + run + ": nothing; not written: metrics.csv rows, trace.json, summary.json");
  // Two ranks' rows for steps 0 and 1 (named 1 and 2), then a row cut short: not counted.
  std::ofstream(dir.file("metrics.csv"))
      << "step,rank,epoch\n0,0,0\n0,1,0\n1,0,0\n1,1,0\n2,0";
  std::ofstream(dir.file("trace.json")) << "{}";
  CHECK(gradsync::kept_results(config, run) ==
        "kept in " + run +
            ": metrics.csv (4 whole rows, steps 1 to 2), trace.json; not written: summary.json");
  // Checkpoints were asked for and none is complete: said too.
  config.checkpoint.every = 10;
  CHECK(gradsync::kept_results(config, run).ends_with(
      "; not written: a complete checkpoint, summary.json"));
}
