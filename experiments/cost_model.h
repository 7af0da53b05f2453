// The alpha-beta (Hockney) cost of one step's gradient synchronisation, per strategy, as
// gradsync implements it. A message costs alpha seconds of latency, a byte beta seconds
// (beta = 1 / link bandwidth). Every process has its own full-duplex link: it may send and
// receive at 1/beta at the same time, and its sends (and its receives) share that one link.
// S = model bytes, N workers, K parameter-server shards. The time is along the critical path:
//
//   dp    replica 0 receives N-1 gradients, then sends N-1 parameter copies, one after the
//         other through its one link: 2(N-1) messages, 2(N-1)S bytes.
//   ps    sync, pushes and pulls pipelined by chunk (a shard updates and answers chunk c while
//         chunk c+1 still arrives): 2 messages, max(S, N*S/K) + max(N, K)*C bytes — the
//         worker's link carries S each way, each shard's link N*S/K each way, the slower link
//         sets the pace, and the last chunk's replies (C = min(512 KiB, S/K) each) drain after.
//   ring  reduce-scatter then all-gather in every one of B buckets: 2(N-1)B messages,
//         2(N-1)/N * S bytes each way on every link.
//
// N = 1 costs nothing for dp and ring; ps still sends S and receives S (2 messages).
// The ring's bytes per link approach 2S while a ps worker's stay S: with K >= N/2 shards on
// their own links, ps overtakes the ring (BytePS's observation), and the model says where.
#pragma once

#include <span>
#include <string>
#include <vector>

namespace gradsync::cost {

enum class Scheme { kDp, kPs, kRing };

// "dp", "ps", "ring" (also "allreduce"); throws ConfigError naming the value otherwise.
Scheme parse_scheme(const std::string& name);
std::string scheme_name(Scheme scheme);  // "dp", "ps", "ring"

// B for a model of `model_bytes` in buckets of `bucket_mb` MiB: about one per bucket_mb MiB of
// gradients, at least 1 (also for a bucket size of 0 or less). The allreduce strategy closes
// buckets at layer boundaries, so a run's own count (summary.json) can differ.
int ring_buckets(double model_bytes, double bucket_mb);

struct Scenario {
  Scheme scheme = Scheme::kRing;
  int workers = 1;         // N >= 1
  int servers = 1;         // K >= 1, ps only
  double model_bytes = 0;  // S
  int buckets = 1;         // B >= 1, ring only: separate all-reduces per step
  // Ring only: the bytes a compressed gradient puts on each link, as a fraction of the
  // uncompressed ring's (ring_wire_fraction); 1: none.
  double wire_fraction = 1;
};

// comm.compression's effect on the ring's bytes (Scenario::wire_fraction), each link against
// the uncompressed 2(N-1)/N S:
//   none 1; fp16, bf16 1/2 (16 bits a value);
//   powersgd: the all-reduced floats over the model's: sum of (n + m) r over the weight matrices
//             plus the 1-D tensors, over the parameters (`powersgd_floats` / `parameters`);
//   topk:     an allgather of 8 k bytes a rank, k = ratio n: (N-1) 8 k over 2(N-1)/N 4 n,
//             N ratio: it grows with N, where the others do not (Deep Gradient Compression's
//             all-gather, which is why sparse methods need ratios well below 1/N).
// Throws ConfigError for an unknown method.
struct Compression {
  std::string method = "none";
  double topk_ratio = 0.01;
  double powersgd_floats = 0;  // powersgd: floats all-reduced per step
  double parameters = 0;       // powersgd: floats of the model
};
double ring_wire_fraction(const Compression& compression, int workers);

struct LinkParams {
  double alpha_s = 0;          // latency per message, seconds
  double beta_s_per_byte = 0;  // seconds per byte = 1 / bandwidth
  double gbps() const;         // bandwidth in Gbit/s (infinity when beta is 0)
};

// time = messages * alpha + bytes * beta
struct CostTerms {
  double messages = 0;
  double bytes = 0;
  double seconds(const LinkParams& link) const {
    return messages * link.alpha_s + bytes * link.beta_s_per_byte;
  }
};

// The critical path of one step. Throws ConfigError on N < 1, K < 1, B < 1 or S < 0.
CostTerms step_terms(const Scenario& scenario);

// Bytes sent plus received per step by the node that moves the most: replica 0 for dp,
// a shard (2N*S/K) or a worker (2S), whichever is more, for ps, any worker for the ring.
double busiest_node_bytes(const Scenario& scenario);

// The smallest K (1 <= K <= max_servers) at which ps's step is faster than the ring's with the
// same N, S and link (ring with one bucket); 0 when no such K. Strictly faster: a tie (N = 2
// with no latency: both move S) is not a win.
int ps_servers_to_beat_ring(int workers, double model_bytes, const LinkParams& link,
                            int max_servers);

// One all-reduce of S bytes over N = H x L ranks, L on each of H hosts (ranks placed in blocks,
// as launchers place them), split by where the bytes go: between processes of one host (shared
// memory, loopback) or across the network between hosts. Bytes sent, summed over every rank.
//   flat ring:     every rank sends 2(N-1)/N S to its right neighbour; H of the N neighbours
//                  are on the next host, so H 2(N-1)/N S cross hosts (none when H = 1)
//   hierarchical:  within each host an all-reduce (2(L-1) S, ring-equivalent) and the leader's
//                  broadcast ((L-1) S); among the H leaders a ring, 2(H-1) S across hosts
// At 2 x 2: 3 S against 2 S across hosts; at H x L with large L the flat ring's inter-host bytes
// approach 2 H S, the hierarchy's stay 2(H-1) S whatever L is.
struct HostBytes {
  double intra_host = 0;
  double inter_host = 0;
};
// Throws ConfigError on hosts < 1, ranks_per_host < 1 or bytes < 0.
HostBytes flat_ring_host_bytes(int hosts, int ranks_per_host, double model_bytes);
HostBytes hierarchical_host_bytes(int hosts, int ranks_per_host, double model_bytes);

// Model-state bytes per rank under ZeRO with fp32 SGD and momentum (4 bytes a value; P
// parameters over N ranks), and what one step moves per rank. The paper's stages:
//   allreduce (stage 0)  params 4P, grads 4P, momentum 4P
//   stage 1              the momentum sharded: 4P/N
//   stage 2              the gradients too: each reduced unit's full gradient freed, 4P/N kept
//   stage 3              the parameters too: 4P/N, plus the layers gathered at the moment
// gradsync's zero as built (strategies/zero/zero_strategy.h) keeps its own shards of the
// parameters and gradients (4P/N each) beside the momentum's, and beside them: at stage 1 the
// model's full parameter and gradient buffers; at stage 2 (the MLP in fp32, on the layer
// storage) the full parameters and two layer gradients, the one being computed and the one
// being reduced (max over l of n(l) + n(l+1)); at stage 3 a window of layers, l and its
// prefetched l - 1 gathered beside l's gradient and l + 1's (max over l of n(l-1) + 2 n(l) +
// n(l+1)). `gradsync_*` below is that, what the ledger measures (common/model_state_memory.h),
// for `layers` the layers' parameter counts in forward order (Model::layer_spans(); empty: the
// model as one layer).
// Bytes sent per rank and step: 2(N-1)/N 4P for stages 0 to 2 (reduce-scatter + all-gather),
// 3(N-1)/N 4P for stage 3 (the parameters gathered again for backward).
struct ZeroMemory {
  double params = 0, grads = 0, optimizer = 0;
  double total() const { return params + grads + optimizer; }
};
// stage 0: allreduce. Throws ConfigError for a stage outside 0..3, ranks < 1 or params < 0.
ZeroMemory zero_paper_bytes(int stage, int ranks, double params);
ZeroMemory zero_gradsync_bytes(int stage, int ranks, double params,
                               const std::vector<double>& layers = {});
double zero_step_bytes(int stage, int ranks, double params);

// One measured run, for calibration.
struct Observation {
  std::string label;  // run name, for messages
  Scenario scenario;
  double measured_s = 0;  // communication per step (communicate + wait), seconds
};

// Fits alpha and beta (both >= 0) to the observations by least squares on the relative error
// (each run counts equally whatever its size). Throws ConfigError when fewer than two
// observations have a positive measured time, or when they cannot separate alpha from beta.
LinkParams calibrate(std::span<const Observation> observations);

}  // namespace gradsync::cost
