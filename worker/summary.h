// summary.json of one run, and the comparison table printed after a preset's runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/config.h"
#include "worker/worker_loop.h"

namespace gradsync {

// One rank's step time distribution (seconds). In a synchronous run the step after one of rank
// 0's evaluations or checkpoints includes waiting it out: it shows in `max`, rarely in p99.
struct StepPercentiles {
  int rank = 0;
  double p50 = 0, p90 = 0, p99 = 0, max = 0;
};

// The straggler of a run: the rank with the highest p99 step time (the first in rank order on a
// tie), and the median of the other ranks' p99 (the mean of the middle two when they are even
// in number), the step time it is measured against.
struct SlowestRank {
  int rank = 0;
  double p99 = 0;
  double others_median_p99 = 0;
};

// Absent with fewer than two ranks: one rank is nobody's straggler.
std::optional<SlowestRank> slowest_rank(const std::vector<StepPercentiles>& ranks);

// One network namespace's link over a run in namespaces (launch/namespace_network.h), as the
// kernel counted it at the veth: every byte on the emulated wire, headers, acknowledgements and
// the rendezvous included, whichever process or library sent it.
struct HostLink {
  std::string name;        // "server 0"; "rank 2" (network.hosts 0); "host 1" (network.hosts)
  std::string netns;       // the namespace: its processes' host id (common/host_id.h)
  std::vector<int> ranks;  // the workers in it; empty for a ps shard
  std::uint64_t sent = 0;  // by its processes, onto the wire
  std::uint64_t received = 0;
};

// Where a rank ran: its host id (common/host_id.h), as its communicator saw it.
struct RankHost {
  int rank = 0;
  std::string host;
};

struct RunSummary {
  std::string run;
  std::string strategy;
  // allreduce: the communicator's library (comm.backend resolved: tcp, gloo, mpi, nccl); "-" else.
  std::string backend = "-";
  int workers = 1;
  std::int64_t global_batch = 0;
  std::int64_t steps = 0;
  std::int64_t parameters = 0;
  double train_seconds = 0;  // rank 0's step time summed, evaluation excluded
  double samples_per_s = 0;
  double final_test_accuracy = 0;
  double final_test_loss = 0;
  double target_accuracy = 0;
  std::optional<double> time_to_accuracy_s;  // first evaluation at or above the target
  std::string busiest_node = "rank 0";       // the node that moved the most bytes
  std::uint64_t busiest_bytes = 0;           // sent + received over the run
  // Per step, averaged over ranks; in a synchronous run without the time ranks spent waiting
  // out rank 0's evaluations and checkpoints (metrics.csv keeps each step as measured).
  StepStats mean_step;
  std::vector<StepPercentiles> step_time;  // per rank, in rank order
  std::optional<SlowestRank> slowest;      // slowest_rank(step_time)
  std::vector<EvalPoint> evals;
  // allreduce: collectives a step issued on rank 0 (its buckets, plus join's flag round), the
  // B the cost model's latency term counts; 0 for other strategies.
  double collectives_per_step = 0;
  // The most bytes of model state (parameters, gradients, optimizer state) a rank held at once:
  // the max over ranks of LoopResult::peak_model_state_bytes, measured by the ranks' ledgers
  // (common/model_state_memory.h); and each kind's own max over ranks. For single and dp the
  // in-process figure: dp's replicas share the process, so it holds all of them. 0: not
  // measured (rank files written before the ledger).
  std::uint64_t peak_model_state_bytes = 0;
  std::uint64_t peak_params_bytes = 0;
  std::uint64_t peak_grads_bytes = 0;
  std::uint64_t peak_optimizer_bytes = 0;
  // ps.continue_without_dead_workers: the workers the run went on without (died or stopped);
  // the figures above are the others'.
  std::vector<int> dropped_workers;
  // Each rank's host, in rank order; empty where the ranks did not report one (in-process runs).
  std::vector<RankHost> rank_hosts;
  // network.namespaces: every namespace's link, shards first, then the workers' hosts; empty
  // otherwise.
  std::vector<HostLink> host_links;
  // network.namespaces: the bytes all the workers' namespaces sent onto their links, divided by
  // the steps run (`steps`): what a step put on the emulated wire between hosts, the rendezvous,
  // headers and acknowledgements spread over it; traffic between ranks of one host never
  // reaches a link. Absent without namespaces or steps.
  std::optional<double> link_bytes_per_step;
};

// Sets s.host_links and s.link_bytes_per_step (from s.steps).
void add_host_links(RunSummary& s, std::vector<HostLink> links);

// Bytes a node other than a worker moved over the run (a parameter-server shard).
struct NodeTraffic {
  std::string name;  // "server 0"
  std::uint64_t bytes = 0;
};

// Combines every rank's loop result; per_rank[0] must be rank 0's (it holds the evaluations).
// `other_nodes` compete with the ranks for the busiest node. `ranks` names the rank of each
// result where some are missing (dropped workers); empty, they are 0, 1, 2, ...
RunSummary summarize(const Config& config, std::int64_t parameters,
                     const std::vector<LoopResult>& per_rank,
                     const std::vector<NodeTraffic>& other_nodes = {},
                     const std::vector<int>& ranks = {});

// Writes summary.json atomically (temporary file, then rename). Throws Error naming the path.
void write_summary(const std::string& path, const RunSummary& summary);

// A markdown table with one row per run: strategy, workers, global batch, samples/s, speed-up
// over the first run, test accuracy, time to target, bytes through the busiest node, and the
// share of a step spent communicating or waiting, the slowest rank's p99 step time, and the peak
// model-state MB (10^6 bytes) per rank. Below the table, a line per run of several ranks naming
// its slowest rank against the others, and one per dp run of several replicas saying that its
// peak model state is the whole process's.
std::string comparison_table(const std::vector<RunSummary>& runs);

}  // namespace gradsync
