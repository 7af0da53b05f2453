// `gradsync teach hierarchical`: runs a flat ring and the hierarchical all-reduce on the same
// simulated hosts (the hierarchical preset: network namespaces, one shaped veth per host), then
// prints, per run, the bytes the kernel counted on the links between hosts beside what the cost
// model (experiments/cost_model.h) predicts, and the bytes the model keeps within each host.
//
// The lesson in one line: the flat ring crosses each host boundary with 2(N-1)/N S, so what
// leaves the hosts grows towards 2HS as hosts fill up; reducing within each host first leaves
// 2(H-1) S for the network, however many ranks a host has, and shared memory carries the rest.
#pragma once

#include <string>
#include <vector>

#include "experiments/run_experiment.h"

namespace gradsync::teach {

struct HierarchicalRow {
  std::string run;
  std::string backend;     // the communicator's: "tcp" (flat), "shm+tcp" (hierarchical)
  int hosts = 1;           // H
  int ranks_per_host = 1;  // L (the first host's, when they differ)
  bool hierarchical = false;
  double measured_inter_mb = 0;  // per step, the kernel's count on the hosts' links; -1: none
  double predicted_inter_mb = 0;
  double predicted_intra_mb = 0;
  double step_ms = 0;  // measured
};

// One row per allreduce run of `runs` with network.hosts (others are skipped). `configs[i]` is
// the configuration of `runs[i]`.
std::vector<HierarchicalRow> hierarchical_rows(const std::vector<Config>& configs,
                                               const std::vector<RunOutcome>& runs);

// The side-by-side table and the paragraph that reads it.
std::string render_hierarchical(const std::vector<HierarchicalRow>& rows);

}  // namespace gradsync::teach
