// Measured runs as cost-model observations, for `gradsync model --calibrate RESULTS_DIR`.
//
//   std::vector<std::string> skipped;
//   const auto observations = gradsync::read_observations("results/scaling-20250101", &skipped);
//   const gradsync::cost::LinkParams link = gradsync::cost::calibrate(observations);
//
// RESULTS_DIR is what `gradsync run` or `gradsync sweep` wrote: a folder of run folders, or one
// run folder. A run folder is one holding config.yaml; its summary.json supplies the parameter
// count and the mean communicate + wait seconds per step (what the model predicts). Runs of
// dp, ps (sync) and allreduce become observations (allreduce is the ring), in folder-name
// order; `single` and ps async / ssp (whose waits are not a synchronous step) are skipped with
// a one-line reason each.
//
// Throws ConfigError (a config.yaml, naming its line and key) or DataError (summary.json, or a
// folder that does not exist or holds no run) naming the file. Reads files only; not
// thread-safe with a run writing the same folder.
#pragma once

#include <string>
#include <vector>

#include "experiments/cost_model.h"

namespace gradsync {

// One observation per usable run; `skipped`, if given, receives "RUN: reason" for each run
// left out.
std::vector<cost::Observation> read_observations(const std::string& results_dir,
                                                 std::vector<std::string>* skipped);

}  // namespace gradsync
