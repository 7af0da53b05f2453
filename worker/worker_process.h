// `gradsync worker`: one rank of a multi-process run (strategies `allreduce` and `ps`), started
// by the local launcher, mpirun, srun or torchrun alike. Its place comes from the environment
// (launch/rendezvous_env.h); the run from a resolved Config (apps/ loads the run's config.yaml
// through experiments/); its outputs go into the run folder:
//   metrics.csv (rows appended), trace.rank<R>.json, rank<R>.json (worker/rank_outputs.h)
// Rank 0 hosts the rendezvous store at MASTER_ADDR:MASTER_PORT and shows the progress line.
#pragma once

#include <string>
#include <vector>

#include "common/config.h"

namespace gradsync {

// Runs the worker loop for this rank; throws on any failure (the caller prints it).
// `config_path` names the file `config` came from, for error messages. `ps_endpoints` lists the
// shards' addresses for strategy `ps` (one per ps.servers).
void run_worker_process(const Config& config, const std::string& config_path,
                        const std::string& run_dir, const std::vector<std::string>& ps_endpoints);

// The environment variable with the launcher's clock origin (steady_clock nanoseconds), so the
// ranks' traces share one time axis.
inline constexpr const char* kOriginEnv = "GRADSYNC_ORIGIN_NS";

}  // namespace gradsync
