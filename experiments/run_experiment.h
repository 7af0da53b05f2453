// Runs presets: one results folder per run, a comparison table across runs.
//
//   <output.dir>/<preset>-<YYYYmmdd-HHMMSS>/
//       comparison.md            the table printed at the end
//       <run>/config.yaml        the fully resolved configuration
//       <run>/metrics.csv        one row per rank per step, flushed as it goes
//       <run>/summary.json       throughput, accuracy, time-to-accuracy, busiest node
//       <run>/trace.json         Chrome trace: one track per rank
//   <output.dir>/latest -> the folder above
//
// `single` and `dp` run in this process (dp as one thread per replica); `allreduce` runs one
// `gradsync worker` process per rank under the local launcher (launch/launcher.h). A
// failure of any replica or process stops the others and propagates the first failure's
// error; files already written stay as they are.
#pragma once

#include <string>
#include <vector>

#include "common/config.h"
#include "experiments/preset.h"
#include "model/dataset.h"
#include "worker/summary.h"

namespace gradsync {

struct RunOutcome {
  RunSummary summary;
  std::string dir;
};

// Runs one configuration on already-loaded data, writing into `run_dir` (created).
RunOutcome run_experiment(const Config& config, const TrainTest& data, const std::string& run_dir);

// Runs one configuration as `workers` processes of this executable on this machine. After a
// failure the whole group is started again, at most `max_restarts` times (torchrun's
// --max_restarts), each time from the run's newest complete checkpoint (prepare_restart in
// worker/checkpoints.h), with a line on stderr naming the failure; a user's interrupt is not
// restarted after.
RunOutcome run_multi_process(const Config& config, const std::string& run_dir,
                             int max_restarts = 0);

struct PresetOutcome {
  std::string dir;
  std::vector<RunOutcome> runs;
};

// Runs every run of the preset in order; logs one line per run to stderr and returns the
// results. `output_dir` overrides each run's output.dir when not empty; `max_restarts` applies
// to runs of worker processes (run_multi_process).
PresetOutcome run_preset(const Preset& preset, const std::string& output_dir, int max_restarts = 0);

}  // namespace gradsync
