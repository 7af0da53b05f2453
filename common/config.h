// The fully resolved configuration of one run. Every field has a default; presets (YAML) and
// `--set key=value` override them (experiments/preset.h). The schema, one row per key with its
// type, range and meaning, is experiments/preset_schema.cpp; `gradsync run --keys` prints it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gradsync {

struct TrainConfig {
  std::int64_t steps = 0;  // > 0: exactly this many steps; 0: run `epochs` whole epochs
  std::int64_t epochs = 1;
  int batch = 64;  // per worker, as in DistributedDataParallel
  double lr = 0.05;
  double momentum = 0.9;
  double weight_decay = 0.0;
  std::uint64_t seed = 1;
  std::int64_t eval_every = 0;    // steps between test-set evaluations; 0 = once per epoch
  double target_accuracy = 0.85;  // for time-to-accuracy in summary.json
  int accumulation_steps = 1;     // micro-batches per optimizer step, no communication between
  // The learning rate over the run's optimizer steps (model/optimizer/sgd_options.h): constant
  // or cosine (annealed to 0 at the last step), after warmup_steps of linear warm-up.
  std::string lr_schedule = "constant";
  std::int64_t warmup_steps = 0;
};

struct DataConfig {
  std::string kind = "fashion-mnist";  // fashion-mnist | idx | synthetic
  std::string dir;                     // idx: an MNIST-format directory; fashion-mnist: optional
  // synthetic teacher-student set
  std::int64_t train_samples = 8192;
  std::int64_t test_samples = 2048;
  int dim = 32;
  int classes = 10;
  // Training-time augmentation of image samples (model/augment.h), resnet only: none |
  // crop_flip (zero-pad by crop_padding, crop back to H x W, flip horizontally half the time),
  // seeded by (train.seed, epoch, sample index). Evaluation reads the samples as they are.
  std::string augment = "none";
  int crop_padding = 2;

  bool operator==(const DataConfig&) const = default;
};

struct ModelConfig {
  std::string kind = "mlp";              // mlp | resnet | synthetic
  std::vector<int> hidden = {256, 256};  // mlp: hidden layer widths; input and output from data
  // resnet (model/resnet/resnet.h): basic blocks per stage (1: ResNet-8), and the channels of
  // the first of its three stages (then 2x and 4x). Input: square one-channel images.
  int resnet_blocks = 1;
  int resnet_width = 16;
  // allreduce, zero: batch norm's statistics all-reduced across ranks in forward and backward
  // (SyncBatchNorm), so each rank normalises by the global batch. single: nothing to reduce.
  bool sync_batchnorm = false;
  // synthetic: a stand-in with real gradient buffers of `parameters` floats, split into
  // `layers` equal layers, whose forward+backward takes `compute_ms` of wall time (an
  // accelerator's compute, during which the CPU is free). ResNet-50 has 25.6M parameters.
  std::int64_t parameters = 25'557'032;
  double compute_ms = 100;
  int layers = 50;
};

struct CommConfig {
  double timeout_s = 60;  // every wait on another rank or replica
  double bucket_mb = 25;  // allreduce: gradient bucket size (DistributedDataParallel's default)
  bool overlap = true;    // allreduce: reduce each bucket as soon as backward has filled it
  bool uneven_inputs = false;  // allreduce: DDP's Join, for ranks with different batch counts
  // allreduce, zero: rank 0's buffers (batch norm's running statistics) broadcast to every rank
  // each step, as DDP's broadcast_buffers; false: each rank keeps its own.
  bool broadcast_buffers = true;
  // allreduce: the library under the Communicator. auto: tcp (gradsync's ring) for a model in
  // host memory, nccl for one on a GPU; gloo: Debian's libgloo; mpi: Open MPI (ranks started by
  // mpirun).
  std::string backend = "auto";
  // allreduce: the backend's all-reduce algorithm. default: the backend's own; gloo also takes
  // ring, ring_chunked, halving_doubling.
  std::string algorithm = "default";
  // allreduce over gloo: the pairs its float allreduce runs on. async: Gloo's default, its
  // event-loop thread reads every socket; sync, busy_poll: Gloo's sync mode, the allreduce's
  // thread reads its own sockets (busy_poll spinning); with halving_doubling only.
  std::string gloo_pairs = "async";
  // allreduce over gloo or mpi: before each collective the ranks exchange what they are about
  // to run, so mismatched collectives fail naming both sides instead of mixing bytes or
  // hanging (tcp and nccl check inline, for nothing). One small message round per collective.
  bool desync_check = true;
  // allreduce on cpu, ranks on several hosts: reduce within each host over shared memory,
  // all-reduce among one leader per host, broadcast within the host (Horovod's hierarchical
  // all-reduce). auto: where some host has more than one rank and the ranks span hosts; on:
  // always (tcp or gloo between hosts); off: one flat ring.
  std::string hierarchical = "auto";
  // allreduce: each bucket's gradient compressed for the wire, as DDP's communication hooks do
  // (strategies/allreduce/bucket_reducer.h). none | fp16 | bf16 (16 bits a value, divided
  // by N before the sum) | powersgd (rank-r low-rank approximation of each weight matrix, error
  // feedback) | topk (the largest topk_ratio of each bucket, error feedback). Steps before
  // compression_start_step run uncompressed (PowerSGD's warm-up).
  std::string compression = "none";
  int powersgd_rank = 1;
  double topk_ratio = 0.01;
  std::int64_t compression_start_step = 0;
};

// `zero` (strategies/zero/zero_strategy.h): ZeRO's stage. 1 shards the optimizer state, 2 also
// reduce-scatters each unit's gradient during backward (and on the MLP frees each layer's once
// reduced); 3 shards the parameters too, each layer gathered before its forward and backward
// (the MLP on the CPU).
struct ZeroConfig {
  int stage = 1;
};

struct PsConfig {
  int servers = 1;            // K shards, each owning a contiguous key range
  std::string mode = "sync";  // sync | async | ssp
  int staleness = 2;          // ssp: how many steps a worker may run ahead of the slowest
  bool continue_without_dead_workers = false;  // async: drop a silent worker and go on
  std::string bind = "127.0.0.1";              // the interface shards listen on
  std::string curve_keys;  // a key file (gradsync server --gen-keys); empty: no CURVE
  double heartbeat_s = 1.0;
};

// Link emulation: every process's sends and receives through the transports are capped at
// link_gbps (common/link.h: one pacer per direction, as a full-duplex NIC), so a server's one
// link saturates as a real one would. 0: no cap.
// namespaces (root, multi-process runs): the same cap enforced by the kernel instead, each
// process in its own network namespace on a tbf-shaped veth (launch/namespace_network.h).
// slow_ranks (allreduce, ps; not with namespaces): these workers' links run at slow_link_gbps
// instead, a straggler on a slower NIC; the shards and the other ranks keep link_gbps.
struct NetworkConfig {
  double link_gbps = 0;
  bool namespaces = false;
  std::vector<int> slow_ranks;
  double slow_link_gbps = 0;
  // hosts (namespaces only): the workers grouped into this many simulated hosts, ranks in
  // contiguous blocks, one namespace and one shaped veth per host; ranks of a host reach each
  // other through loopback and shared memory, unshaped, as on one machine. 0: every process
  // a host of its own.
  int hosts = 0;
};

// `gradsync sweep`: every run of the preset at each of these worker counts.
struct SweepConfig {
  std::vector<int> workers;
};

// Checkpoints: every `every` steps the run's state (parameters, optimizer state, step; the
// sampler's position follows from the step) is written atomically under `dir`, by rank 0 or, for
// ps, by every server shard for its key range. `gradsync run PRESET --resume DIR` continues.
struct CheckpointConfig {
  std::int64_t every = 0;  // steps between checkpoints; 0: none
  std::string dir;         // empty: <run folder>/checkpoints
  std::string resume;      // a checkpoint to continue from (worker/checkpoints.h)
};

struct OutputConfig {
  std::string dir = "results";     // runs go to <dir>/<preset>-<timestamp>/<run>/
  std::int64_t trace_steps = 200;  // steps recorded in trace.json (per rank)
  std::string progress = "auto";   // auto | terminal | plain | off
};

struct Config {
  std::string name;  // run name: `runs[i].name`, else "<strategy>-<workers>"
  std::string strategy = "single";
  int workers = 1;
  std::string device = "cpu";  // cpu | gpu (one GPU per worker from LOCAL_RANK; dp: G devices)
  TrainConfig train;
  DataConfig data;
  ModelConfig model;
  CommConfig comm;
  PsConfig ps;
  ZeroConfig zero;
  NetworkConfig network;
  SweepConfig sweep;
  CheckpointConfig checkpoint;
  OutputConfig output;
};

// The strategies whose ranks reduce over a Communicator (allreduce/): each rank a process, the
// comm.* keys theirs.
inline bool uses_communicator(const std::string& strategy) {
  return strategy == "allreduce" || strategy == "zero";
}

}  // namespace gradsync
