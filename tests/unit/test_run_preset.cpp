// run_preset checks every run against its data and this machine before the first one starts: a
// mistake in the last run of a preset is refused at once, not after the others trained, and
// leaves no folder.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "common/error.h"
#include "experiments/preset.h"
#include "experiments/run_experiment.h"
#include "tests/support/temp_dir.h"

TEST_CASE("run preset: a batch the data cannot fill is refused before any run, naming the key") {
  gradsync::testing::TempDir dir;
  // 256 training samples; run b asks for 4 workers x 100 = 400 a step.
  const gradsync::Preset preset = gradsync::load_preset_text(R"(
data: {kind: synthetic, train_samples: 256, test_samples: 64}
model: {hidden: [8]}
train: {steps: 2, batch: 16}
runs:
  - {name: a, strategy: single}
  - {name: b, strategy: dp, workers: 4, train: {batch: 100}}
)",
                                                             "two.yaml", {});
  const std::string out = dir.file("results");
  std::string error;
  try {
    gradsync::run_preset(preset, out);
  } catch (const gradsync::ConfigError& e) {
    error = e.what();
  }
  CHECK(error ==
        "b: train.batch: 100 per worker x 4 workers = 400 samples a step, but the training set "
        "holds 256");
  CHECK(!std::filesystem::exists(out));  // run a did not train first
}

TEST_CASE("run preset: a model no machine can hold is refused before any run or folder") {
  gradsync::testing::TempDir dir;
  // Run b's 1000000 x 1000000 layer alone is 4 TB of parameters: refused on any machine, by
  // its estimate, before run a trains and before the results folder exists.
  const gradsync::Preset preset = gradsync::load_preset_text(R"(
data: {kind: synthetic, train_samples: 256, test_samples: 64}
model: {hidden: [8]}
train: {steps: 2, batch: 16}
runs:
  - {name: a, strategy: single}
  - {name: b, strategy: single, model: {hidden: [1000000, 1000000]}}
)",
                                                             "big.yaml", {});
  const std::string out = dir.file("results");
  std::string error;
  try {
    gradsync::run_preset(preset, out);
  } catch (const gradsync::ConfigError& e) {
    error = e.what();
  }
  CHECK(error.starts_with("b: model.hidden: [1000000, 1000000] needs about "));
  CHECK(error.find("available") != std::string::npos);
  CHECK(!std::filesystem::exists(out));
}
