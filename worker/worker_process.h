// `gradsync worker`: one rank of a multi-process run (strategies `allreduce` and `ps`), started
// by the local launcher, mpirun, srun or torchrun alike. Its place comes from the environment
// (launch/rendezvous_env.h); the run from a resolved Config (apps/ resolves a preset or the
// run's config.yaml through experiments/); its outputs go into the run folder:
//   metrics.csv (rows appended), trace.rank<R>.json, rank<R>.json (worker/rank_outputs.h)
// Rank 0 hosts the job's rendezvous store (launch/rendezvous_env.h: store_port), decides the run
// folder and shows the progress line. The other ranks wait for it (up to comm.timeout_s): the store
// tells them the run folder, and an allreduce ring forms through it.
#pragma once

#include <string>
#include <vector>

#include "common/config.h"
#include "worker/clock_origin.h"

namespace gradsync {

struct WorkerProcessOptions {
  // Where the Config came from (a preset or a run's config.yaml), for error messages.
  std::string config_path;
  // The run folder. Empty: rank 0 makes <output.dir>/<preset>-<timestamp>/<run> as
  // `gradsync run` would (worker/run_folder.h), points <output.dir>/latest at it, and tells
  // the other ranks; given: rank 0 creates it if missing, and the others write into the same.
  std::string run_dir;
  std::string preset_name;  // names a folder rank 0 makes
  // The resolved Config as YAML: rank 0 writes it to <run folder>/config.yaml unless the local
  // launcher did (it starts the ranks with a folder ready).
  std::string config_yaml;
  std::vector<std::string> ps_endpoints;  // ps: one per ps.servers
  // A restart after a failure (--resume auto; torchrun's TORCHELASTIC_RESTART_COUNT > 0 says
  // so too): the run folder is the earlier attempt's (run_dir, or <output.dir>/latest/<run>),
  // and every rank goes on from its newest complete checkpoint, or from the start without one;
  // metrics.csv keeps only the rows before it.
  bool restart = false;
};

// Runs the worker loop for this rank; throws on any failure (the caller prints it). For ps
// without options.ps_endpoints, the last ps.servers ranks of the launch serve the key ranges
// instead (gradsync server's work, their endpoints posted in the store), and the others train.
void run_worker_process(const Config& config, const WorkerProcessOptions& options);

// comm.backend mpi needs an MPI launcher (mpirun, srun --mpi=pmix): without one in the
// environment, a ConfigError saying how to start the ranks (`preset`: the preset as the user
// named it, for that hint). No-op for other backends. Checked before anything else, the
// launcher's world size included.
void check_mpi_launcher(const Config& config, const std::string& preset);

// The workers of a ps launch of `launched` ranks without --ps-endpoints (all but the last
// ps.servers); a ConfigError naming WORLD_SIZE when that leaves none.
int ps_workers(const Config& config, int launched);

}  // namespace gradsync
