#include "worker/model_factory.h"

#include <chrono>
#include <cmath>

#include "common/error.h"
#include "launch/rendezvous_env.h"
#include "model/mlp.h"
#include "model/resnet/resnet.h"
#include "model/synthetic_model.h"
#include "strategies/make_strategy.h"
#ifdef GRADSYNC_HAVE_CUDA
#include "model/cuda/cuda_device.h"
#include "model/cuda/cuda_mlp.h"
#include "model/cuda/cuda_resnet.h"
#endif

namespace gradsync {
namespace {

// check_device_available without the count of ranks on this host (see make_gpu_model).
void check_gpu_usable(const Config& config) {
  if (config.device != "gpu") return;
#ifdef GRADSYNC_HAVE_CUDA
  if (config.model.kind != "mlp" && config.model.kind != "resnet") {
    throw ConfigError(config.name, "device",
                      "gpu runs model.kind mlp or resnet ('" + config.model.kind +
                          "' stays on the CPU: use device: cpu)");
  }
  if (config.strategy == "zero") {
    // Its shards, optimizer state and gathered layers are host memory (preset_checks.cpp says
    // the same to presets; this is for callers that build models directly).
    throw ConfigError(config.name, "strategy",
                      "zero shards buffers in host memory in this version: use device: cpu");
  }
  if (config.strategy == "allreduce" && config.comm.uneven_inputs) {
    // The allreduce strategy's Join path rescales and zeroes gradients in host code.
    throw ConfigError(config.name, "comm.uneven_inputs",
                      "not supported with device: gpu in this version");
  }
  if (cuda::cuda_device_count() == 0) {
    throw ConfigError(config.name, "device",
                      "gpu: no CUDA device is visible (" + cuda::no_device_reason() + ")");
  }
#else
  throw ConfigError(
      config.name, "device",
      "'" + config.device + "' is not available in this build (cpu only: built without CUDA)");
#endif
  if (config.strategy == "dp") check_dp_on_gpus(config.workers);
}

ResNetShape resnet_shape(const Config& config, const std::vector<int>& widths);

// A model on CUDA device `device`, or the reason it cannot be had, as a one-line ConfigError.
std::unique_ptr<Model> make_gpu_model(const Config& config, const std::vector<int>& widths,
                                      int max_batch, std::optional<int> device) {
  // Not check_device_available: in a worker process `workers` counts the ranks of every host;
  // run_worker_process checks the ranks on this one (check_gpu_per_rank).
  check_gpu_usable(config);
#ifdef GRADSYNC_HAVE_CUDA
  if (!device) {
    // A caller that does not choose a device does not set up its strategy (optimizer,
    // communicator) for device buffers either: running would hand GPU pointers to host code.
    throw ConfigError(config.name, "device",
                      "gpu: this run path does not place models on GPUs (make_model was "
                      "called without a CUDA device)");
  }
  const int visible = cuda::cuda_device_count();
  if (*device < 0 || *device >= visible) {
    throw ConfigError(config.name, "device",
                      "gpu: CUDA device " + std::to_string(*device) + " is not visible (" +
                          std::to_string(visible) + " device(s); one GPU per worker, from " +
                          "LOCAL_RANK)");
  }
  // The thread that builds a GPU model trains it (a worker process's main thread, a dp
  // replica's thread): its device becomes the thread's own, so that no CUDA call on it runs
  // with the default device 0 current, creating a context on GPU 0 for a rank on another GPU.
  cuda::set_device(*device);
  if (config.model.kind == "resnet") {
    auto resnet = std::make_unique<CudaResNet>(resnet_shape(config, widths), max_batch, *device);
    resnet->set_augmentation({.enabled = config.data.augment == "crop_flip",
                              .padding = config.data.crop_padding,
                              .seed = config.train.seed});
    return resnet;
  }
  return std::make_unique<CudaMlp>(widths, max_batch, *device);
#else
  (void)widths;
  (void)max_batch;
  (void)device;
  return nullptr;  // not reached: check_device_available refused
#endif
}

// The ResNet's input and classes: one channel, square images of data.dim pixels (Fashion-MNIST's
// 784 = 28 x 28), widths = {input, ..., classes} as for the MLP.
ResNetShape resnet_shape(const Config& config, const std::vector<int>& widths) {
  const int dim = widths.front();
  const int side = static_cast<int>(std::lround(std::sqrt(static_cast<double>(dim))));
  if (side * side != dim) {
    throw ConfigError(config.name, "model.kind",
                      "resnet reads square one-channel images, but data.dim " +
                          std::to_string(dim) +
                          " is not a square (Fashion-MNIST's: 784 = 28 x 28)");
  }
  ResNetShape shape;
  shape.height = shape.width = side;
  shape.classes = widths.back();
  shape.blocks_per_stage = config.model.resnet_blocks;
  shape.stage_width = config.model.resnet_width;
  return shape;
}

}  // namespace

void check_device_available(const Config& config) {
  check_gpu_usable(config);
  // `gradsync run` starts every rank on this host.
  if (reduces_over_nccl(config)) check_gpu_per_rank(config, config.workers, visible_gpus());
}

bool reduces_over_nccl(const Config& config) {
  if (config.device != "gpu") return false;
  if (config.strategy == "dp") return true;  // its GPU group reduces and broadcasts over NCCL
  // comm.backend auto means nccl for device buffers (allreduce/make_communicator.h); tcp and
  // gloo would stage through host memory, where ranks may share a GPU.
  return config.strategy == "allreduce" &&
         (config.comm.backend == "auto" || config.comm.backend == "nccl");
}

void check_gpu_per_rank(const Config& config, int local_ranks, int visible) {
  // dp's replicas are threads of one process, checked by check_dp_on_gpus.
  if (config.strategy != "allreduce" || !reduces_over_nccl(config)) return;
  if (local_ranks <= visible) return;
  // NCCL refuses two ranks on one GPU only inside ncclCommInitRank ("Duplicate GPU
  // detected"), after the run has started: refused here, before anything is made.
  throw ConfigError(config.name, "workers",
                    "allreduce on gpu reduces over NCCL, which needs a GPU per rank: " +
                        std::to_string(local_ranks) + " ranks on this host but " +
                        std::to_string(visible) +
                        " CUDA device(s) visible (fewer workers, or strategy ps, whose workers "
                        "may share a GPU)");
}

int model_device(const Config& config, int replica) {
  if (config.device != "gpu") return -1;
  if (config.strategy == "dp") return replica;
  // A launcher that gives each process one GPU (srun --gpus-per-task=1, CUDA_VISIBLE_DEVICES per
  // rank) leaves device 0 as the only one; otherwise LOCAL_RANK names it.
  const int visible = visible_gpus();
  if (visible == 1) return 0;
  const int local_rank = read_rendezvous_env().local_rank;
  // Host-staged workers (ps; allreduce over tcp or gloo) may share GPUs, so more of them than
  // GPUs go round the GPUs; NCCL ranks keep their own (check_gpu_per_rank refuses more).
  if (visible > 1 && !reduces_over_nccl(config)) return local_rank % visible;
  return local_rank;
}

std::unique_ptr<Model> make_model(const Config& config, const std::vector<int>& widths,
                                  int max_batch, std::optional<int> device) {
  // The MLP reads flat vectors and the synthetic model no data: only the ResNet augments.
  if (config.data.augment != "none" && config.model.kind != "resnet") {
    throw ConfigError(config.name, "data.augment",
                      "'" + config.data.augment + "' augments images for model.kind resnet only");
  }
  std::unique_ptr<Model> model;
  if (config.device == "gpu") {
    model = make_gpu_model(config, widths, max_batch, device);
  } else if (config.device != "cpu") {
    throw ConfigError(config.name, "device",
                      "'" + config.device + "' is not a device (valid: cpu, gpu)");
  } else if (config.model.kind == "synthetic") {
    const auto compute = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double, std::milli>(config.model.compute_ms));
    model = std::make_unique<SyntheticModel>(config.model.parameters, config.model.layers, compute);
  } else if (config.model.kind == "mlp") {
    // zero stages 2 (fp32) and 3 give the MLP its layer storage later: no buffer it will hold
    // meanwhile, or that buffer would be the rank's peak model state.
    MlpBuffers buffers = MlpBuffers::kFull;
    if (config.strategy == "zero" && config.zero.stage == 3) buffers = MlpBuffers::kNone;
    if (config.strategy == "zero" && config.zero.stage == 2 && config.comm.compression == "none") {
      buffers = MlpBuffers::kParamsOnly;
    }
    model = std::make_unique<Mlp>(widths, max_batch, buffers);
  } else if (config.model.kind == "resnet") {
    auto resnet = std::make_unique<ResNet>(resnet_shape(config, widths), max_batch);
    resnet->set_augmentation({.enabled = config.data.augment == "crop_flip",
                              .padding = config.data.crop_padding,
                              .seed = config.train.seed});
    model = std::move(resnet);
  } else {
    throw ConfigError(config.name, "model.kind", "unknown model '" + config.model.kind + "'");
  }
  model->init_params(config.train.seed);
  return model;
}

std::int64_t model_parameters(const Config& config, const std::vector<int>& widths) {
  if (config.model.kind == "synthetic") return config.model.parameters;
  if (config.model.kind == "resnet") {
    return static_cast<std::int64_t>(ResNet::parameter_count(resnet_shape(config, widths)));
  }
  std::int64_t count = 0;
  for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
    count += static_cast<std::int64_t>(widths[l]) * widths[l + 1] + widths[l + 1];
  }
  return count;
}

bool gpu_compiled_in() {
#ifdef GRADSYNC_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int visible_gpus() {
#ifdef GRADSYNC_HAVE_CUDA
  return cuda::cuda_device_count();
#else
  return 0;
#endif
}

}  // namespace gradsync
