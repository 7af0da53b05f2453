// Checks across keys after resolution (contract: preset_checks.h).
#include "experiments/preset_checks.h"

#include <filesystem>
#include <string>
#include <system_error>

#include "allreduce/make_communicator.h"
#include "common/error.h"
#include "model/idx_reader.h"
#include "strategies/make_strategy.h"
#include "worker/model_factory.h"

namespace gradsync {
namespace {

namespace fs = std::filesystem;

// comm.backend and comm.algorithm together with the device and link emulation: one meaning per
// key, whichever backend (README, "Backends").
void check_backend(const Origins& origins, const std::string& source, const Config& config) {
  if (!uses_communicator(config.strategy)) return;  // the keys are allreduce's and zero's
  const std::string& backend = config.comm.backend;
  const std::string where = origin_of(origins, {"comm.backend", "device"}, source + ":1");
  if (config.comm.algorithm != "default" && backend != "gloo") {
    throw ConfigError(origin_of(origins, {"comm.algorithm"}, where), "comm.algorithm",
                      "'" + config.comm.algorithm + "' is gloo's; " +
                          (backend == "auto" ? std::string("tcp or nccl") : backend) +
                          " takes only default");
  }
  if (config.comm.gloo_pairs != "async") {
    const std::string at = origin_of(origins, {"comm.gloo_pairs"}, where);
    if (backend != "gloo") {
      throw ConfigError(
          at, "comm.gloo_pairs",
          "'" + config.comm.gloo_pairs + "' is for gloo's pairs; comm.backend is " + backend);
    }
    if (config.comm.algorithm != "halving_doubling") {
      throw ConfigError(at, "comm.gloo_pairs",
                        config.comm.gloo_pairs +
                            " pairs take comm.algorithm halving_doubling "
                            "only (README, \"Backends\")");
    }
  }
  if (backend == "nccl" && config.device != "gpu") {
    throw ConfigError(where, "comm.backend", "nccl reduces GPU buffers: it needs device: gpu");
  }
  // tcp, gloo and mpi with device: gpu stage each bucket through pinned host memory
  // (strategies/allreduce/host_staged_communicator.h): several ranks may share one GPU.
  // gradsync paces only its own transports; another library's sockets go through the kernel,
  // and only in network namespaces, which mpirun's ranks cannot be put in
  // (experiments/run_experiment.cpp refuses mpi with namespaces).
  // Shared memory has no link to pace: emulation would be silently bypassed.
  if (backend == "shm" && (config.network.link_gbps > 0 || config.network.namespaces)) {
    const char* key = config.network.link_gbps > 0 ? "network.link_gbps" : "network.namespaces";
    throw ConfigError(origin_of(origins, {key, "network"}, where), key,
                      "shm moves bytes through shared memory, which no emulated link paces: "
                      "use comm.backend tcp (or gloo in namespaces) to emulate a network");
  }
  if (backend == "mpi" && config.network.link_gbps > 0) {
    throw ConfigError(origin_of(origins, {"network.link_gbps"}, where), "network.link_gbps",
                      "mpi's sockets are not gradsync's to pace, and mpirun starts its ranks "
                      "outside network namespaces: link emulation is for tcp and gloo");
  }
  if (backend == "gloo" && config.network.link_gbps > 0 && !config.network.namespaces) {
    throw ConfigError(origin_of(origins, {"network.link_gbps"}, where), "network.link_gbps",
                      backend + "'s sockets are not gradsync's to pace: with comm.backend " +
                          backend +
                          ", link emulation needs network.namespaces: true (the "
                          "kernel shapes every byte)");
  }
}

// Link emulation paces gradsync's own sockets (network.link_gbps) or a veth per process
// (network.namespaces); NCCL moves GPU buffers over NVLink, PCIe or shared memory and never
// touches either, so the run would claim a link speed it did not have. Host-staged GPU runs
// (ps on gpu) go through the sockets and keep it.
void check_link_with_nccl(const Origins& origins, const std::string& source, const Config& config) {
  const NetworkConfig& network = config.network;
  if (!reduces_over_nccl(config) || (network.link_gbps <= 0 && !network.namespaces)) return;
  const char* key = network.link_gbps > 0 ? "network.link_gbps" : "network.namespaces";
  throw ConfigError(origin_of(origins, {key, "network"}, source + ":1"), key,
                    config.strategy +
                        " on gpu reduces over NCCL, which bypasses gradsync's emulated link "
                        "(network.link_gbps, network.namespaces): drop them, or use device: cpu "
                        "or ps on gpu");
}

// network.hosts: the workers grouped into simulated hosts, each a network namespace on its own
// shaped link (experiments/run_experiment.cpp), so only runs of worker processes in namespaces
// have them, and every host holds a worker at least.
void check_hosts(const Origins& origins, const std::string& source, const Config& config) {
  const NetworkConfig& network = config.network;
  if (network.hosts <= 0) return;
  const std::string where = origin_of(origins, {"network.hosts", "network"}, source + ":1");
  if (config.strategy != "allreduce" && config.strategy != "ps") {
    throw ConfigError(where, "network.hosts",
                      config.strategy +
                          " runs its workers as threads of one process: simulated hosts group "
                          "worker processes (allreduce, ps)");
  }
  if (!network.namespaces) {
    throw ConfigError(where, "network.hosts",
                      "hosts are simulated by network namespaces, one per host: it needs "
                      "network.namespaces: true (and root)");
  }
  if (network.hosts > config.workers) {
    throw ConfigError(where, "network.hosts",
                      std::to_string(network.hosts) + " hosts for " +
                          std::to_string(config.workers) +
                          " workers: each simulated host holds one worker at least");
  }
}

// comm.hierarchical: on reduces within each host over shared memory and among one leader per
// host over tcp or gloo (allreduce/make_communicator.h, which refuses the rest only once the
// ranks run). Like every comm key, it is allreduce's: other strategies ignore it.
void check_hierarchical(const Origins& origins, const std::string& source, const Config& config) {
  if (config.strategy != "allreduce" || config.comm.hierarchical != "on") return;
  // comm.backend auto means nccl for a model on a GPU.
  const std::string backend = reduces_over_nccl(config) ? "nccl" : config.comm.backend;
  if (backend == "auto" || backend == "tcp" || backend == "gloo") return;
  throw ConfigError(origin_of(origins, {"comm.hierarchical", "comm"}, source + ":1"),
                    "comm.hierarchical",
                    "on reduces within each host over shared memory and between hosts over tcp "
                    "or gloo: it needs comm.backend auto, tcp or gloo, not " +
                        backend + (config.comm.backend == "auto" ? " (auto on device: gpu)" : ""));
}

// comm.compression: DDP's comm hooks, per bucket of the allreduce strategy, on host buffers
// (strategies/allreduce/gradient_compression.h); fp16, bf16 and topk also on the pushes of ps,
// whose replies stay exact fp32 (strategies/ps/push_encoder.h; a GPU model's ps worker pushes
// from host copies already). PowerSGD all-reduces P and Q among the workers, which ps workers
// never do. Join averages over the ranks that trained after the sum, which a compression that
// averages on its own cannot follow.
void check_compression(const Origins& origins, const std::string& source, const Config& config) {
  const std::string& method = config.comm.compression;
  if (method == "none") return;
  const std::string where = origin_of(origins, {"comm.compression", "comm"}, source + ":1");
  const std::string& strategy = config.strategy;
  if (strategy != "allreduce" && strategy != "ps" && strategy != "zero") {
    const std::string why = strategy == "single" ? "single has no wire (one worker)"
                            : strategy == "dp"   ? "dp reduces in memory"
                                                 : "not " + strategy + " in this version";
    throw ConfigError(where, "comm.compression",
                      method + ": compression runs over the wire: allreduce, zero and ps; " + why);
  }
  if (strategy == "ps") {
    if (method == "powersgd") {
      throw ConfigError(where, "comm.compression",
                        "powersgd needs an all-reduce of P and Q among the workers, which ps "
                        "workers never do: ps pushes take fp16, bf16 or topk");
    }
    return;
  }
  if (strategy == "zero" && method == "powersgd") {
    throw ConfigError(where, "comm.compression",
                      "powersgd approximates whole matrices, and zero reduce-scatters each "
                      "unit's slices: zero takes fp16, bf16 or topk");
  }
  if (config.device == "gpu") {
    throw ConfigError(where, "comm.compression",
                      method + " encodes gradients in host memory: it needs device: cpu");
  }
  if (config.comm.uneven_inputs) {
    throw ConfigError(origin_of(origins, {"comm.uneven_inputs"}, where), "comm.compression",
                      "not with comm.uneven_inputs: Join averages over the ranks that trained, "
                      "after the sum, and " +
                          method + " averages within its own reduction");
  }
}

// network.slow_ranks: stragglers on a slower emulated link. Each is a process of its own with a
// Link of its own (worker/run_plan.cpp), so only allreduce and ps have them, and only where
// gradsync paces the sockets itself: not in namespaces (the kernel shapes every process at
// link_gbps there), not over another library's sockets (gloo, mpi, nccl).
void check_slow_ranks(const Origins& origins, const std::string& source, const Config& config) {
  const NetworkConfig& network = config.network;
  if (network.slow_ranks.empty() && network.slow_link_gbps <= 0) return;
  const std::string where = origin_of(
      origins, {"network.slow_ranks", "network.slow_link_gbps", "network"}, source + ":1");
  if (network.slow_ranks.empty()) {
    throw ConfigError(origin_of(origins, {"network.slow_link_gbps"}, where), "network.slow_ranks",
                      "network.slow_link_gbps is set but no rank is slow: list the workers it "
                      "applies to, e.g. network.slow_ranks: [1]");
  }
  if (network.slow_link_gbps <= 0) {
    throw ConfigError(where, "network.slow_link_gbps",
                      "network.slow_ranks needs the slow ranks' link rate in Gbit/s, e.g. "
                      "network.slow_link_gbps: 0.1");
  }
  for (int rank : network.slow_ranks) {
    if (rank >= config.workers) {
      throw ConfigError(origin_of(origins, {"network.slow_ranks"}, where), "network.slow_ranks",
                        "rank " + std::to_string(rank) + ", but the run has " +
                            std::to_string(config.workers) + " workers (ranks 0 to " +
                            std::to_string(config.workers - 1) + ")");
    }
  }
  if (config.strategy != "allreduce" && config.strategy != "ps") {
    throw ConfigError(where, "network.slow_ranks",
                      config.strategy +
                          " runs its workers as threads of one process over one link: a slow rank "
                          "needs a process of its own (allreduce, ps)");
  }
  if (network.namespaces) {
    throw ConfigError(where, "network.slow_ranks",
                      "with network.namespaces the kernel shapes every process at "
                      "network.link_gbps; slow ranks are gradsync's own pacing: leave "
                      "namespaces false");
  }
  const std::string& backend = config.comm.backend;
  if (config.strategy == "allreduce" &&
      (backend == "gloo" || backend == "mpi" || backend == "shm" || reduces_over_nccl(config))) {
    throw ConfigError(where, "network.slow_ranks",
                      (reduces_over_nccl(config) ? std::string("nccl") : backend) +
                          "'s transfers are not gradsync's to pace: slow ranks need "
                          "comm.backend tcp (or auto on cpu)");
  }
}

// The namespace network puts every host of a run on one /24 (launch/namespace_network.cpp):
// 249 namespaces at most, shards and the workers' hosts together (a host per worker, or
// network.hosts of them).
constexpr int kMaxNamespaceProcesses = 249;

// zero: stages 1 to 3 on host buffers, stage 3 for the MLP (strategies/zero/zero_strategy.h).
void check_zero(const Origins& origins, const std::string& source, const Config& config) {
  if (config.strategy != "zero") return;
  const std::string where = origin_of(origins, {"zero.stage", "zero", "strategy"}, source + ":1");
  if (config.zero.stage == 3 && config.model.kind != "mlp") {
    // Stage 3 runs the model layer by layer on the strategy's storage (model/layer_storage.h).
    throw ConfigError(where, "zero.stage",
                      "3 gathers the parameters layer by layer, which model.kind " +
                          config.model.kind + " does not offer (mlp does; use stage 1 or 2)");
  }
  if (config.zero.stage == 3 && config.comm.compression != "none") {
    throw ConfigError(origin_of(origins, {"comm.compression"}, where), "comm.compression",
                      "zero stage 3 reduce-scatters each layer in fp32: compression none only");
  }
  if (config.device == "gpu") {
    throw ConfigError(origin_of(origins, {"device"}, where), "device",
                      "zero shards buffers in host memory in this version: use device: cpu");
  }
  if (config.comm.uneven_inputs) {
    throw ConfigError(origin_of(origins, {"comm.uneven_inputs"}, where), "comm.uneven_inputs",
                      "Join is allreduce's: zero needs every rank in every step");
  }
}

// model.sync_batchnorm: SyncBatchNorm's all-reduces run through the communicator across the
// ranks, which allreduce and zero have; single has one replica and nothing to reduce (accepted,
// as a no-op). make_strategies refuses the same, for callers that skip the presets.
void check_sync_batchnorm(const Origins& origins, const std::string& source, const Config& config) {
  if (!config.model.sync_batchnorm) return;
  const std::string where =
      origin_of(origins, {"model.sync_batchnorm", "model", "strategy"}, source + ":1");
  if (config.strategy == "dp" || config.strategy == "ps") {
    throw ConfigError(where, "model.sync_batchnorm", sync_batchnorm_refusal(config.strategy));
  }
  if (config.strategy == "allreduce" && config.comm.uneven_inputs) {
    throw ConfigError(origin_of(origins, {"comm.uneven_inputs"}, where), "model.sync_batchnorm",
                      sync_batchnorm_refusal("join"));
  }
}

void check_processes(const Origins& origins, const std::string& source, const Config& config) {
  const bool processes = uses_communicator(config.strategy) || config.strategy == "ps";
  const int shards = config.strategy == "ps" ? config.ps.servers : 0;
  const int hosts = config.network.hosts > 0 ? config.network.hosts : config.workers;
  if (processes && config.network.namespaces && hosts + shards > kMaxNamespaceProcesses) {
    const std::string where =
        config.network.hosts > 0
            ? origin_of(origins, {"network.hosts", "ps.servers", "network.namespaces"},
                        source + ":1")
            : origin_of(origins, {"workers", "ps.servers", "network.namespaces"}, source + ":1");
    throw ConfigError(
        where, "network.namespaces",
        "one network of at most " + std::to_string(kMaxNamespaceProcesses) + " processes, got " +
            (config.network.hosts > 0 ? std::to_string(hosts) + " network.hosts"
                                      : std::to_string(config.workers) + " workers") +
            (shards > 0 ? " + " + std::to_string(shards) + " ps.servers" : std::string()) +
            " (leave it false and use network.link_gbps alone)");
  }
  // The shards would refuse it as they start, after the results folder exists: sync averages
  // every worker's gradient each step, so a worker cannot be dropped without changing the answer.
  if (config.strategy == "ps" && config.ps.mode == "sync" &&
      config.ps.continue_without_dead_workers) {
    throw ConfigError(
        origin_of(origins, {"ps.continue_without_dead_workers", "ps.mode", "ps"}, source + ":1"),
        "ps.continue_without_dead_workers",
        "not possible in ps.mode sync (async and ssp only): sync averages every "
        "worker's gradient each step");
  }
}

}  // namespace

std::string origin_of(const Origins& origins, std::initializer_list<const char*> keys,
                      const std::string& fallback) {
  for (const char* key : keys) {
    if (auto it = origins.find(key); it != origins.end()) return it->second;
  }
  return fallback;
}

// Runs after all layers, since kind and dir may come from different ones.
void check_data(const Origins& origins, const std::string& source, DataConfig* data) {
  if (data->kind == "synthetic") return;
  const std::string where = origin_of(origins, {"data.dir", "data.kind", "data"}, source + ":1");
  if (data->kind == "idx" && data->dir.empty()) {
    throw ConfigError(where, "data.dir", "required when data.kind is idx (an MNIST-format folder)");
  }
  const bool defaulted = data->dir.empty();
  if (defaulted) data->dir = kFashionMnistDir;
  std::error_code error;
  if (fs::is_directory(data->dir, error)) return;
  std::string problem = fs::exists(data->dir, error)
                            ? "'" + data->dir + "' is not a directory"
                            : "directory '" + data->dir + "' does not exist";
  if (data->kind == "fashion-mnist") {
    problem += defaulted
                   ? " (install it with `apt-get install dataset-fashion-mnist`, or set data.dir)"
                   : " (the default comes with `apt-get install dataset-fashion-mnist`)";
  }
  throw ConfigError(where, "data.dir", problem);
}

void check_combinations(const Origins& origins, const std::string& source, const Config& config) {
  check_backend(origins, source, config);
  check_link_with_nccl(origins, source, config);
  check_hierarchical(origins, source, config);
  check_compression(origins, source, config);
  check_hosts(origins, source, config);
  check_zero(origins, source, config);
  check_sync_batchnorm(origins, source, config);
  check_processes(origins, source, config);
  check_slow_ranks(origins, source, config);
  if (config.strategy == "single" && config.workers != 1) {
    throw ConfigError(origin_of(origins, {"workers", "strategy"}, source + ":1"), "workers",
                      "`single` runs one worker, got " + std::to_string(config.workers) +
                          " (give it the global batch instead)");
  }
  // Augmentation crops and flips images: the ResNet's (make_model refuses the same).
  if (config.data.augment != "none" && config.model.kind != "resnet") {
    throw ConfigError(origin_of(origins, {"data.augment", "model.kind", "model"}, source + ":1"),
                      "data.augment",
                      "'" + config.data.augment + "' augments images for model.kind resnet only");
  }
  // The synthetic model splits its parameters into layers of at least one each.
  if (config.model.kind == "synthetic" && config.model.layers > config.model.parameters) {
    throw ConfigError(
        origin_of(origins, {"model.layers", "model.parameters", "model"}, source + ":1"),
        "model.layers",
        std::to_string(config.model.layers) + " layers of a model of " +
            std::to_string(config.model.parameters) +
            " model.parameters: at most one layer per parameter");
  }
}

}  // namespace gradsync
