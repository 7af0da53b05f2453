#include "strategies/make_strategy.h"

#include "common/config.h"
#include "common/error.h"
#include "strategies/allreduce/allreduce_strategy.h"
#include "strategies/buffer_staging.h"
#include "strategies/dp/dp_strategy.h"
#include "strategies/ps/host_staged_strategy.h"
#include "strategies/ps/ps_strategy.h"
#include "strategies/single_strategy.h"
#include "strategies/zero/zero_strategy.h"
#ifdef GRADSYNC_HAVE_NCCL
#include "model/cuda/cuda_device.h"
#include "strategies/dp/dp_gpu_strategy.h"
#endif

namespace gradsync {
namespace {

std::vector<std::unique_ptr<SyncStrategy>> make_dp_on_gpus(const StrategyOptions& options) {
  check_dp_on_gpus(options.workers);
#ifdef GRADSYNC_HAVE_NCCL
  return make_dp_gpu_group(options.workers, options.sgd, options.timeout);
#else
  return {};  // not reached: check_dp_on_gpus refused
#endif
}

// SyncBatchNorm: the model's statistics summed over every rank, blocking, in forward and
// backward. A weak reference: the model may outlive the communicator (a worker's model is made
// before it), and a call after the communicator is gone is a bug, not a hang.
// A GPU model's sums are host memory too, staged for its communicator (buffer_staging.h).
void set_sync_batchnorm(Model& model, const std::shared_ptr<Communicator>& comm) {
  auto staging = std::make_shared<BufferStaging>(model.device());
  model.set_batch_stats_reducer(
      [weak = std::weak_ptr<Communicator>(comm), staging](std::span<float> sums) {
        const std::shared_ptr<Communicator> comm = weak.lock();
        GRADSYNC_CHECK(comm != nullptr, "sync_batchnorm: the communicator is gone");
        comm->allreduce(staging->upload(sums), ReduceOp::kSum);
        staging->download(sums);
      });
}

// The one strategy of a worker process (allreduce, ps).
std::unique_ptr<SyncStrategy> make_process_strategy(const StrategyOptions& options,
                                                    const ProcessContext& process) {
  GRADSYNC_CHECK(process.model != nullptr, "a worker process's strategy needs its model");
  if (options.sync_batchnorm && options.name == "ps") {
    throw ConfigError("strategy", "model.sync_batchnorm", sync_batchnorm_refusal("ps"));
  }
  if (options.sync_batchnorm && options.join_uneven && options.name == "allreduce") {
    throw ConfigError("strategy", "model.sync_batchnorm", sync_batchnorm_refusal("join"));
  }
  if (options.name == "ps") {
    PsClientOptions client;
    client.rank = process.rank;
    client.world_size = options.workers;
    client.endpoints = options.ps_endpoints;
    client.same_host_ipc = options.ps_ipc;
    client.timeout = options.timeout;
    client.heartbeat = options.ps_heartbeat;
    client.curve = options.ps_curve;
    client.link = options.link;
    client.run_id = options.ps_run_id;
    // comm.compression on the pushes (fp16, bf16, topk; the presets refuse powersgd for ps).
    client.compression = {options.compression.method, options.compression.topk_ratio,
                          options.compression.start_step};
    // A GPU model's ps worker goes through pinned host buffers (ZeroMQ sends host memory).
    return adapt_to_model_device(std::make_unique<PsStrategy>(client, process.first_step),
                                 *process.model);
  }
  GRADSYNC_CHECK(process.comm != nullptr, options.name + " needs the communicator over every rank");
  if (options.sync_batchnorm) set_sync_batchnorm(*process.model, process.comm);
  if (options.name == "zero") {
    ZeroStrategyOptions zero;
    zero.stage = options.zero_stage;
    zero.unit_bytes = options.bucket_bytes;
    zero.sgd = options.sgd;
    zero.tensors = process.model->tensors();
    zero.params = process.model->param_count();
    zero.compression = options.compression;
    zero.broadcast_buffers = options.broadcast_buffers;
    zero.first_step = static_cast<std::int64_t>(process.first_step);
    // Stages 2 and 3 run the model on the strategy's layer storage where it offers one.
    if (zero.stage >= 2) zero.layers = process.model->layer_spans();
    if (zero.stage == 3 && zero.layers.empty()) {
      throw ConfigError("strategy", "zero.stage",
                        "stage 3 gathers the parameters layer by layer, which this model does "
                        "not offer (model.kind mlp on cpu does)");
    }
    auto strategy = std::make_unique<ZeroStrategy>(process.comm, std::move(zero));
    // From here on the model's gradients (stage 2) or parameters and gradients (stage 3) live
    // in the strategy's shards.
    if (LayerStorage* storage = strategy->layer_storage()) {
      GRADSYNC_CHECK(process.model->set_layer_storage(storage),
                     "zero stage 3: the model refused the layer storage");
    }
    return strategy;
  }
  AllreduceStrategyOptions allreduce;
  allreduce.bucket_bytes = options.bucket_bytes;
  allreduce.overlap = options.overlap;
  allreduce.join_uneven = options.join_uneven;
  allreduce.sgd = options.sgd;
  allreduce.device = process.model->device();
  allreduce.compression = options.compression;
  allreduce.compression.tensors = process.model->tensors();
  allreduce.first_step = static_cast<std::int64_t>(process.first_step);
  allreduce.broadcast_buffers = options.broadcast_buffers;
  return std::make_unique<AllreduceStrategy>(process.comm, allreduce);
}

}  // namespace

void check_dp_on_gpus(int workers) {
#ifdef GRADSYNC_HAVE_NCCL
  // One GPU per replica: NCCL cannot form a communicator with two ranks on one device.
  const int visible = cuda::cuda_device_count();
  if (visible < workers) {
    throw ConfigError("strategy", "device",
                      "dp on gpu runs one replica per GPU: workers = " + std::to_string(workers) +
                          " but " + std::to_string(visible) + " CUDA device(s) are visible");
  }
#elif defined(GRADSYNC_HAVE_CUDA)
  (void)workers;
  throw ConfigError("strategy", "device",
                    "dp on gpu needs NCCL: this gradsync was built with CUDA but without NCCL");
#else
  (void)workers;
  throw ConfigError("strategy", "device",
                    "dp on gpu needs CUDA and NCCL: this gradsync was built without CUDA");
#endif
}

std::string sync_batchnorm_refusal(const std::string& strategy) {
  if (strategy == "dp") {
    return "dp's replicas share no communicator: SyncBatchNorm runs under allreduce or zero "
           "(torch's, under DistributedDataParallel only)";
  }
  if (strategy == "ps") {
    return "ps workers have no collective among them: SyncBatchNorm runs under allreduce or zero";
  }
  return "not with comm.uneven_inputs: a rank that has run out of batches cannot join the others' "
         "forward (DDP's Join does not support SyncBatchNorm either)";
}

const std::vector<std::string>& strategy_names() {
  static const std::vector<std::string> names = {"single", "dp", "allreduce", "zero", "ps"};
  return names;
}

std::vector<std::unique_ptr<SyncStrategy>> make_strategies(
    const StrategyOptions& options, const std::optional<ProcessContext>& process) {
  const bool per_process = uses_communicator(options.name) || options.name == "ps";
  if (per_process && !process) {
    throw ConfigError(
        "strategy", "strategy",
        "`" + options.name + "` runs one process per rank (gradsync worker), not in-process");
  }
  if (process && (options.name == "single" || options.name == "dp")) {
    throw ConfigError("config", "strategy",
                      "`" + options.name + "` does not run as worker processes");
  }
  if (per_process) {
    std::vector<std::unique_ptr<SyncStrategy>> out;
    out.push_back(make_process_strategy(options, *process));
    return out;
  }
  if (options.name == "single") {
    if (options.workers != 1) {
      throw ConfigError("strategy", "workers",
                        "`single` runs exactly one worker, got " + std::to_string(options.workers));
    }
    std::vector<std::unique_ptr<SyncStrategy>> out;
    out.push_back(std::make_unique<SingleStrategy>(options.sgd, options.device));
    return out;
  }
  if (options.name == "dp") {
    if (options.sync_batchnorm) {
      throw ConfigError("strategy", "model.sync_batchnorm", sync_batchnorm_refusal("dp"));
    }
    if (options.device >= 0) return make_dp_on_gpus(options);
    return make_dp_group(options.workers, options.sgd, options.timeout, options.link);
  }
  std::string valid;
  for (const auto& name : strategy_names()) valid += (valid.empty() ? "" : ", ") + name;
  throw ConfigError("strategy", "strategy",
                    "unknown strategy '" + options.name + "' (valid: " + valid + ")");
}

}  // namespace gradsync
