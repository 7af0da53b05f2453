// `gradsync sweep PRESET`: every run of a preset at every worker count of sweep.workers, then
// one CSV and one markdown table across them (what plots/plot_results.py draws scaling from).
//
//   <output.dir>/<preset>-sweep-<timestamp>/
//       sweep.csv        one row per run: the columns of kSweepColumns
//       sweep.md         strategy, N, samples/s, scaling efficiency, busiest node, comm share
//       comparison.md    the usual table
//       <run>-n<N>/      each run's results folder, as `gradsync run` writes it
//
// Scaling is weak, as in DistributedDataParallel: train.batch is per worker, so the global
// batch grows with N. Scaling efficiency (1 = ideal) is a run's samples/s per worker over its
// series' baseline; see sweep_rows().
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/config.h"
#include "experiments/preset.h"
#include "experiments/run_experiment.h"

namespace gradsync {

// The columns of sweep.csv, in order.
extern const char* const kSweepColumns;

// The runs of the grid: each run of the preset at each N of its sweep.workers, named
// "<run>-n<N>"; a `single` run appears once, at N = 1. Throws ConfigError naming the preset
// when a run has no sweep.workers, or when two grid points would get the same name.
std::vector<Config> expand_sweep(const Preset& preset);

struct SweepRow {
  Config config;
  RunSummary summary;
  std::optional<double> scaling_efficiency;
};

// Pairs each run's configuration with its outcome and computes scaling efficiency: samples/s
// per worker relative to the series' baseline, the same series at N = 1, else the `single`
// run, else the series' smallest N. A series is one run of the preset at every N (sweep.csv's
// `series` column: the run's name).
std::vector<SweepRow> sweep_rows(const std::vector<Config>& configs,
                                 const std::vector<RunSummary>& summaries);

std::string sweep_csv(const std::vector<SweepRow>& rows);
std::string sweep_markdown(const std::vector<SweepRow>& rows);

struct SweepOutcome {
  std::string dir;
  std::vector<SweepRow> rows;
};

// Runs the grid in order (as run_preset does) and writes sweep.csv and sweep.md.
SweepOutcome run_sweep(const Preset& preset, const std::string& output_dir);

}  // namespace gradsync
