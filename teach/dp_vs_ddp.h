// `gradsync teach dp-vs-ddp`: runs DataParallel-style `dp` and DDP-style `allreduce` on the
// same model, batch and emulated links (the dp-vs-ddp preset), then prints, per N, what each
// measured beside what the alpha-beta model (experiments/cost_model.h) predicts for the
// preset's link: bytes through the busiest node, communication per step, step time.
//
// The lesson in one line: dp funnels 2(N-1)S through replica 0, so its communication grows
// linearly in N; the ring puts 2(N-1)/N S on every link at once, nearly flat in N, and DDP
// hides part of even that behind backward (the measured exposed time is then below the model).
#pragma once

#include <string>
#include <vector>

#include "experiments/cost_model.h"
#include "experiments/run_experiment.h"

namespace gradsync::teach {

struct DpVsDdpRow {
  std::string run;
  cost::Scheme scheme = cost::Scheme::kDp;
  int workers = 1;
  bool overlap = false;       // allreduce: buckets reduced during backward
  double measured_bytes = 0;  // busiest node, sent + received per step
  double predicted_bytes = 0;
  double measured_comm_s = 0;  // communicate + wait per step (exposed, for overlapped runs)
  double predicted_comm_s = 0;
  double step_s = 0;  // measured
};

// One row per dp or allreduce run of `runs` (others are skipped). The prediction uses the
// run's network.link_gbps with alpha = 0; a run without a link cap has no time prediction
// (predicted_comm_s = 0). `configs[i]` is the configuration of `runs[i]`.
std::vector<DpVsDdpRow> dp_vs_ddp_rows(const std::vector<Config>& configs,
                                       const std::vector<RunOutcome>& runs);

// The side-by-side table and the paragraph that reads it.
std::string render_dp_vs_ddp(const std::vector<DpVsDdpRow>& rows);

}  // namespace gradsync::teach
