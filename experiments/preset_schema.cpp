#include "experiments/preset_schema.h"

#include <string>
#include <vector>

#include "strategies/make_strategy.h"

namespace gradsync {
namespace {

using yaml_schema::above_at_most;
using yaml_schema::at_least;
using yaml_schema::at_least_below;
using yaml_schema::between;
using yaml_schema::Field;
using yaml_schema::KeySpec;
using yaml_schema::kUnbounded;
using yaml_schema::Type;
using yaml_schema::zero_or_between;

// Upper bounds no real run reaches, chosen so that every product gradsync forms from them stays
// far inside an int64: the samples a run processes, train.steps x train.batch x workers x
// train.accumulation_steps, is at most 1e8 x 2^16 x 2^10 x 2^10 < 6.9e18 (summary.json's
// samples/s, the progress line), and an epoch-based run's, train.epochs x data.train_samples,
// at most 1e15. Whether such a run fits in memory is checked separately, before anything starts
// (experiments/memory_estimate.h).
constexpr double kMaxSteps = 1e8;     // train.steps, and the step intervals below it
constexpr double kMaxWorkers = 1024;  // workers, sweep.workers: ranks of one run
constexpr double kMaxBatch = 65536;   // per worker
constexpr double kMaxSamples = 1e9;   // a synthetic split
constexpr double kMaxWidth = 1e6;     // data.dim, each of model.hidden

const std::vector<std::string>& data_kinds() {
  static const std::vector<std::string> kinds = {"fashion-mnist", "idx", "synthetic"};
  return kinds;
}
const std::vector<std::string>& augmentations() {
  static const std::vector<std::string> kinds = {"none", "crop_flip"};
  return kinds;
}
const std::vector<std::string>& lr_schedules() {
  static const std::vector<std::string> kinds = {"constant", "cosine"};
  return kinds;
}
const std::vector<std::string>& model_kinds() {
  static const std::vector<std::string> kinds = {"mlp", "resnet", "synthetic"};
  return kinds;
}
const std::vector<std::string>& ps_modes() {
  static const std::vector<std::string> modes = {"sync", "async", "ssp"};
  return modes;
}
const std::vector<std::string>& comm_backends() {
  static const std::vector<std::string> names = {"auto", "tcp", "shm", "gloo", "mpi", "nccl"};
  return names;
}
const std::vector<std::string>& comm_algorithms() {
  static const std::vector<std::string> names = {"default", "ring", "ring_chunked",
                                                 "halving_doubling"};
  return names;
}
const std::vector<std::string>& gloo_pair_modes() {
  static const std::vector<std::string> modes = {"async", "sync", "busy_poll"};
  return modes;
}
const std::vector<std::string>& hierarchical_modes() {
  static const std::vector<std::string> modes = {"auto", "on", "off"};
  return modes;
}
const std::vector<std::string>& compression_methods() {
  static const std::vector<std::string> methods = {"none", "fp16", "bf16", "powersgd", "topk"};
  return methods;
}
const std::vector<std::string>& devices() {
  static const std::vector<std::string> kinds = {"cpu", "gpu"};
  return kinds;
}
const std::vector<std::string>& progress_modes() {
  static const std::vector<std::string> modes = {"auto", "terminal", "plain", "off"};
  return modes;
}

// A lambda per row lets one table point into any nested member of Config.
#define GRADSYNC_FIELD(member) [](Config& c) -> Field { return &c.member; }

// Rows are grouped by section: to_yaml emits one block per section in this order.
// clang-format off
const KeySpec kRows[] = {
    // key, type, range, description, field[, choices[, run_only[, preset_wide]]]
    {"name", Type::kString, kUnbounded, "run name (default <strategy>-<workers>); names its folder",
     GRADSYNC_FIELD(name), nullptr, true},
    {"strategy", Type::kChoice, kUnbounded, "gradient-synchronisation strategy",
     GRADSYNC_FIELD(strategy), strategy_names},
    {"workers", Type::kInteger, between(1, kMaxWorkers), "data-parallel replicas",
     GRADSYNC_FIELD(workers)},
    {"device", Type::kChoice, kUnbounded,
     "cpu, or gpu: one GPU per worker (LOCAL_RANK); dp: one process over G GPUs",
     GRADSYNC_FIELD(device), devices},
    {"train.steps", Type::kInteger, between(0, kMaxSteps),
     "steps to run; 0 = run train.epochs epochs", GRADSYNC_FIELD(train.steps)},
    {"train.epochs", Type::kInteger, between(1, 1e6), "whole epochs to run when train.steps is 0",
     GRADSYNC_FIELD(train.epochs)},
    {"train.batch", Type::kInteger, between(1, kMaxBatch), "batch size per worker",
     GRADSYNC_FIELD(train.batch)},
    {"train.lr", Type::kNumber, above_at_most(0, 1000), "learning rate", GRADSYNC_FIELD(train.lr)},
    {"train.momentum", Type::kNumber, at_least_below(0, 1), "SGD momentum",
     GRADSYNC_FIELD(train.momentum)},
    // Past 1, one step's decay alone would flip every weight's sign at any usual learning rate.
    {"train.weight_decay", Type::kNumber, between(0, 1), "L2 weight decay",
     GRADSYNC_FIELD(train.weight_decay)},
    // Any 64-bit seed: it is only mixed (SplitMix64), never multiplied.
    {"train.seed", Type::kInteger, at_least(0), "seed for weights, data order and synthetic data",
     GRADSYNC_FIELD(train.seed)},
    {"train.eval_every", Type::kInteger, between(0, kMaxSteps),
     "steps between evaluations; 0 = per epoch", GRADSYNC_FIELD(train.eval_every)},
    {"train.target_accuracy", Type::kNumber, above_at_most(0, 1),
     "test accuracy that time-to-accuracy measures", GRADSYNC_FIELD(train.target_accuracy)},
    {"train.accumulation_steps", Type::kInteger, between(1, 1024),
     "micro-batches per optimizer step; no communication between them (DDP's no_sync)",
     GRADSYNC_FIELD(train.accumulation_steps)},
    {"train.lr_schedule", Type::kChoice, kUnbounded,
     "learning rate over the run: constant, or cosine (annealed to 0 at the last step)",
     GRADSYNC_FIELD(train.lr_schedule), lr_schedules},
    {"train.warmup_steps", Type::kInteger, between(0, kMaxSteps),
     "steps of linear learning-rate warm-up from lr/warmup_steps to lr",
     GRADSYNC_FIELD(train.warmup_steps)},
    {"data.kind", Type::kChoice, kUnbounded, "data set", GRADSYNC_FIELD(data.kind), data_kinds},
    {"data.dir", Type::kString, kUnbounded, "data folder (idx: required; fashion-mnist: optional)",
     GRADSYNC_FIELD(data.dir)},
    {"data.train_samples", Type::kInteger, between(1, kMaxSamples), "synthetic: training samples",
     GRADSYNC_FIELD(data.train_samples)},
    {"data.test_samples", Type::kInteger, between(1, kMaxSamples), "synthetic: test samples",
     GRADSYNC_FIELD(data.test_samples)},
    {"data.dim", Type::kInteger, between(1, kMaxWidth), "synthetic: input dimension",
     GRADSYNC_FIELD(data.dim)},
    // The synthetic teacher balances its classes on 8192 samples' logits
    // (model/synthetic_data.cpp): 10000 classes already take 650 MB and seconds to do so.
    {"data.classes", Type::kInteger, between(1, 10000), "synthetic: classes",
     GRADSYNC_FIELD(data.classes)},
    {"data.augment", Type::kChoice, kUnbounded,
     "training-time augmentation (resnet): crop_flip = zero-padded random crop, horizontal flip",
     GRADSYNC_FIELD(data.augment), augmentations},
    {"data.crop_padding", Type::kInteger, between(0, 64), "crop_flip: zero padding, pixels",
     GRADSYNC_FIELD(data.crop_padding)},
    {"model.kind", Type::kChoice, kUnbounded, "model (synthetic: chosen size and compute time)",
     GRADSYNC_FIELD(model.kind), model_kinds},
    {"model.hidden", Type::kIntList, between(1, kMaxWidth),
     "mlp: hidden layer widths, e.g. [256, 256]", GRADSYNC_FIELD(model.hidden)},
    // A trillion: four times GPT-3's; the memory check refuses far less on any one host.
    {"model.parameters", Type::kInteger, between(1, 1e12), "synthetic: parameter count",
     GRADSYNC_FIELD(model.parameters)},
    // An hour at most: it becomes a sleep in nanoseconds, which must not overflow a clock.
    {"model.compute_ms", Type::kNumber, between(0, 3.6e6),
     "synthetic: forward+backward milliseconds", GRADSYNC_FIELD(model.compute_ms)},
    {"model.layers", Type::kInteger, between(1, 1e6),
     "synthetic: equal layers, each reported to the strategy when its gradient is ready",
     GRADSYNC_FIELD(model.layers)},
    {"model.resnet_blocks", Type::kInteger, between(1, 100),
     "resnet: basic blocks per stage (1: ResNet-8, 3: ResNet-20)",
     GRADSYNC_FIELD(model.resnet_blocks)},
    {"model.resnet_width", Type::kInteger, between(1, 1024),
     "resnet: channels of the first stage (the second and third have 2x and 4x)",
     GRADSYNC_FIELD(model.resnet_width)},
    {"model.sync_batchnorm", Type::kBool, kUnbounded,
     "allreduce, zero: batch norm's statistics all-reduced across ranks (SyncBatchNorm); "
     "false: each rank normalises by its own batch",
     GRADSYNC_FIELD(model.sync_batchnorm)},
    // A millisecond at least (the waits count whole milliseconds), a week at most (a deadline
    // of now + timeout must not overflow any clock, and a longer wait is a hang).
    {"comm.timeout_s", Type::kNumber, between(0.001, 604800),
     "seconds any wait on another rank may take",
     GRADSYNC_FIELD(comm.timeout_s)},
    // A KiB at least: smaller rounds to a bucket of a few floats, or of none (an internal check);
    // a TiB at most (more is one bucket anyway, and the byte count must fit a size_t).
    {"comm.bucket_mb", Type::kNumber, between(0.001, 1048576),
     "allreduce: gradient bucket size in MiB (as DDP's bucket_cap_mb)",
     GRADSYNC_FIELD(comm.bucket_mb)},
    {"comm.overlap", Type::kBool, kUnbounded,
     "allreduce: reduce buckets during backward (false: all after backward)",
     GRADSYNC_FIELD(comm.overlap)},
    {"comm.uneven_inputs", Type::kBool, kUnbounded,
     "allreduce: ranks that run out of batches serve the others' collectives (DDP's Join)",
     GRADSYNC_FIELD(comm.uneven_inputs)},
    {"comm.broadcast_buffers", Type::kBool, kUnbounded,
     "allreduce, zero: rank 0's running statistics (batch norm) broadcast to every rank each "
     "step, as DDP's broadcast_buffers (false: each rank keeps its own)",
     GRADSYNC_FIELD(comm.broadcast_buffers)},
    {"comm.backend", Type::kChoice, kUnbounded,
     "allreduce: the library (auto: shm for ranks of one host, else tcp, on cpu; nccl on gpu; "
     "tcp: gradsync's ring; shm: "
     "gradsync's shared memory, ranks of one host; gloo; mpi: Open MPI, its ranks started by "
     "mpirun; nccl)",
     GRADSYNC_FIELD(comm.backend), comm_backends},
    {"comm.algorithm", Type::kChoice, kUnbounded,
     "allreduce: the backend's all-reduce (default; gloo: ring, ring_chunked, halving_doubling)",
     GRADSYNC_FIELD(comm.algorithm), comm_algorithms},
    {"comm.gloo_pairs", Type::kChoice, kUnbounded,
     "allreduce over gloo: the pairs its allreduce runs on (async: Gloo's event-loop thread "
     "reads every socket; sync: the allreduce's own thread does; busy_poll: sync, spinning; "
     "sync and busy_poll with comm.algorithm halving_doubling)",
     GRADSYNC_FIELD(comm.gloo_pairs), gloo_pair_modes},
    {"comm.desync_check", Type::kBool, kUnbounded,
     "allreduce over gloo or mpi: ranks compare each collective before running it (false: a "
     "mismatch may hang until comm.timeout_s or mix bytes; tcp checks inline, always)",
     GRADSYNC_FIELD(comm.desync_check)},
    {"comm.hierarchical", Type::kChoice, kUnbounded,
     "allreduce on cpu: reduce within each host over shared memory, then among one leader per "
     "host (auto: when ranks span hosts and some host has several; on; off: one flat ring)",
     GRADSYNC_FIELD(comm.hierarchical), hierarchical_modes},
    {"comm.compression", Type::kChoice, kUnbounded,
     "allreduce on cpu: each bucket compressed for the wire, as DDP's comm hooks (none; fp16, "
     "bf16: 16 bits a value; powersgd: low-rank, error feedback; topk: largest values, error "
     "feedback)",
     GRADSYNC_FIELD(comm.compression), compression_methods},
    {"comm.powersgd_rank", Type::kInteger, between(1, 1024),
     "powersgd: rank r of each weight matrix's approximation (PyTorch's "
     "matrix_approximation_rank)",
     GRADSYNC_FIELD(comm.powersgd_rank)},
    {"comm.topk_ratio", Type::kNumber, between(1e-6, 1),
     "topk: fraction of each bucket's values sent (the largest magnitudes)",
     GRADSYNC_FIELD(comm.topk_ratio)},
    {"comm.compression_start_step", Type::kInteger, between(0, kMaxSteps),
     "steps run uncompressed before comm.compression starts (PowerSGD's start_powerSGD_iter)",
     GRADSYNC_FIELD(comm.compression_start_step)},
    {"zero.stage", Type::kInteger, between(1, 3),
     "zero: ZeRO stage (1: optimizer state sharded; 2: also gradients, reduce-scattered during "
     "backward and freed; 3: also parameters, each layer gathered before its forward and "
     "backward: mlp on cpu, 1.5x the bytes)",
     GRADSYNC_FIELD(zero.stage)},
    {"ps.servers", Type::kInteger, between(1, 256), "ps: server shards, each owning a key range",
     GRADSYNC_FIELD(ps.servers)},
    {"ps.mode", Type::kChoice, kUnbounded, "ps: consistency (sync, async, ssp)",
     GRADSYNC_FIELD(ps.mode), ps_modes},
    {"ps.staleness", Type::kInteger, between(0, 1e6),
     "ps ssp: steps a worker may run ahead of the slowest", GRADSYNC_FIELD(ps.staleness)},
    {"ps.continue_without_dead_workers", Type::kBool, kUnbounded,
     "ps async and ssp: drop a silent worker and carry on",
     GRADSYNC_FIELD(ps.continue_without_dead_workers)},
    {"ps.bind", Type::kString, kUnbounded, "ps: interface the shards listen on",
     GRADSYNC_FIELD(ps.bind)},
    {"ps.curve_keys", Type::kString, kUnbounded,
     "ps: CURVE key file shared by shards and workers; empty: no encryption",
     GRADSYNC_FIELD(ps.curve_keys)},
    {"ps.heartbeat_s", Type::kNumber, between(0.001, 3600), "ps: seconds between worker heartbeats",
     GRADSYNC_FIELD(ps.heartbeat_s)},
    // 1 Mbit/s at least, 10 Tbit/s at most: nobody emulates links outside that, and one of
    // 1e-300 Gbit/s would make a message's pacing delay a duration no clock holds.
    {"network.link_gbps", Type::kNumber, zero_or_between(0.001, 10000),
     "emulated link: Gbit/s each process may send, and receive, through the transports; 0: no cap",
     GRADSYNC_FIELD(network.link_gbps)},
    {"network.namespaces", Type::kBool, kUnbounded,
     "root: each process of a multi-process run in its own network namespace, tbf at link_gbps",
     GRADSYNC_FIELD(network.namespaces)},
    {"network.slow_ranks", Type::kIntList, between(0, kMaxWorkers - 1),
     "allreduce, ps: workers whose emulated link runs at slow_link_gbps instead (stragglers)",
     GRADSYNC_FIELD(network.slow_ranks)},
    {"network.slow_link_gbps", Type::kNumber, zero_or_between(0.001, 10000),
     "emulated link of network.slow_ranks, Gbit/s each way; the others keep link_gbps",
     GRADSYNC_FIELD(network.slow_link_gbps)},
    {"network.hosts", Type::kInteger, between(0, kMaxWorkers),
     "with namespaces: workers grouped into this many simulated hosts (contiguous ranks, one "
     "shaped veth per host); 0: every process its own host",
     GRADSYNC_FIELD(network.hosts)},
    {"sweep.workers", Type::kIntList, between(1, kMaxWorkers),
     "gradsync sweep: worker counts for every run", GRADSYNC_FIELD(sweep.workers)},
    {"checkpoint.every", Type::kInteger, between(0, kMaxSteps),
     "steps between checkpoints; 0: none", GRADSYNC_FIELD(checkpoint.every)},
    {"checkpoint.dir", Type::kString, kUnbounded,
     "checkpoint folder; empty: <run folder>/checkpoints", GRADSYNC_FIELD(checkpoint.dir)},
    {"checkpoint.resume", Type::kString, kUnbounded,
     "continue from this checkpoint (a step-N folder, or the newest in a folder); --resume sets it",
     GRADSYNC_FIELD(checkpoint.resume)},
    {"output.dir", Type::kString, kUnbounded, "results root: <dir>/<preset>-<timestamp>/<run>/",
     GRADSYNC_FIELD(output.dir), nullptr, false, true},
    // Five spans a step per rank are kept in memory until the run ends: a million steps is
    // already about half a GB of trace.json per rank.
    {"output.trace_steps", Type::kInteger, between(0, 1e6),
     "steps recorded in trace.json per rank", GRADSYNC_FIELD(output.trace_steps)},
    {"output.progress", Type::kChoice, kUnbounded,
     "progress display (auto: redrawn in place on a terminal, rank 0's of multi-process runs "
     "too; elsewhere a plain line every 10 s)",
     GRADSYNC_FIELD(output.progress), progress_modes},
};
// clang-format on

#undef GRADSYNC_FIELD

}  // namespace

std::span<const yaml_schema::KeySpec> preset_schema() { return kRows; }

}  // namespace gradsync
