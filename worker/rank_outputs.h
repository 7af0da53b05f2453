// What a rank process leaves in the run folder for the launcher, and how the launcher folds
// it into the run's files:
//   rank<R>.json        that rank's LoopResult (steps, times, byte totals, evaluations, peak
//                       model-state bytes, in all and by kind) and host
//   trace.rank<R>.json  that rank's Chrome trace, merged into trace.json
//   trace.shard<K>.json a ps shard's Chrome trace, merged likewise
// The per-rank files are removed once merged.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"
#include "worker/summary.h"
#include "worker/worker_loop.h"

namespace gradsync {

std::string rank_result_path(const std::string& run_dir, int rank);
std::string rank_trace_path(const std::string& run_dir, int rank);
std::string shard_trace_path(const std::string& run_dir, int shard);
// Every per-process trace a run of `config` writes: its ranks', then its ps shards'.
std::vector<std::string> run_trace_paths(const Config& config, const std::string& run_dir);

// Atomic (temporary file, then rename). Throws Error naming the path. Called by the rank itself:
// the file also records this process's host id (common/host_id.h).
void write_rank_result(const std::string& path, const LoopResult& result);
// Throws Error naming the path when the file is missing or malformed. `host`, when given, gets
// the rank's host id ("" from a file written before it was recorded).
LoopResult read_rank_result(const std::string& path, std::string* host = nullptr);

// A parameter-server shard's traffic over the run (server<K>.json).
std::string server_result_path(const std::string& run_dir, int shard);
void write_server_traffic(const std::string& path, std::uint64_t bytes_sent,
                          std::uint64_t bytes_received);
// sent + received; throws Error naming the path when missing or malformed.
std::uint64_t read_server_traffic(const std::string& path);

// Concatenates the processes' trace events into `out` and removes the inputs. Missing inputs
// (a rank that died) are skipped. They share one time axis already (worker/trace_writer.h).
void merge_traces(const std::vector<std::string>& inputs, const std::string& out);

// Blocks until every other process of a run left its result file (rank<R>.json for R != `rank`;
// server<K>.json for ps): how rank 0 folds a run that no gradsync launcher supervises and whose
// workers share no communicator (ps). Polls the run folder, which must be shared as under
// mpirun on one machine or a shared filesystem. Throws TimeoutError after `timeout` naming the
// files still missing.
void wait_for_run_outputs(const Config& config, const std::string& run_dir, int rank,
                          std::chrono::milliseconds timeout);

// After every process of a run has exited cleanly: merges the ranks' traces into trace.json,
// summarises their results (and the shards' traffic, for ps; `host_links`, the launcher's
// kernel counts in network namespaces) into summary.json, removes the per-process files and
// returns the summary. Throws Error naming a missing or malformed file.
RunSummary fold_rank_outputs(const Config& config, const std::string& run_dir,
                             std::vector<HostLink> host_links = {});

}  // namespace gradsync
