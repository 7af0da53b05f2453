// What a failed run leaves in its folder, said in one line before the failure itself (which
// stays the run's last line): which files are complete and can be used, and which were never
// written.
//
//   gradsync: run ring failed; kept in results/x/ring: metrics.csv (240 whole rows, steps 1 to
//   120), trace.json, checkpoint step-00000100; not written: summary.json
//
// metrics.csv rows are whole by construction (worker/metrics_writer.h), trace.json is merged on
// failure, checkpoints count only when complete (resolve_checkpoint's rule).
#pragma once

#include <string>

#include "common/config.h"

namespace gradsync {

std::string kept_results(const Config& config, const std::string& run_dir);

}  // namespace gradsync
