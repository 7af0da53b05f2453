// `gradsync teach zero`: runs allreduce and ZeRO's stages on the same model (the zero preset),
// then prints, per run, the peak model-state bytes a rank held, measured where the buffers were
// allocated (common/model_state_memory.h), beside what the cost model (experiments/cost_model.h)
// says for this build and for the paper's stage, and the bytes each rank sent per step beside
// one all-reduce's (stage 3 moves 1.5x: every layer gathered for forward and again for
// backward, its gradient reduce-scattered).
//
// The lesson in one line: sharding the optimizer state (stage 1) costs no extra traffic, a
// reduce-scatter and an all-gather move what one all-reduce moves; what a rank keeps falls with
// N, and the further stages trade more of it for the same bytes (stage 2) or 1.5x (stage 3).
#pragma once

#include <string>
#include <vector>

#include "experiments/run_experiment.h"

namespace gradsync::teach {

struct ZeroRow {
  std::string run;
  int stage = 0;  // 0: allreduce
  int workers = 1;
  double measured_mb = 0;  // peak model-state bytes per rank, 10^6
  double gradsync_mb = 0;  // the cost model, as built
  double paper_mb = 0;     // the cost model, the paper's stage
  double sent_mb = 0;      // per rank and step, measured
  double model_sent_mb = 0;
  double step_ms = 0;
};

// One row per allreduce or zero run of `runs`; `configs[i]` is the configuration of `runs[i]`.
std::vector<ZeroRow> zero_rows(const std::vector<Config>& configs,
                               const std::vector<RunOutcome>& runs);

std::string render_zero(const std::vector<ZeroRow>& rows);

}  // namespace gradsync::teach
