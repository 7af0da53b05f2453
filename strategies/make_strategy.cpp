#include "strategies/make_strategy.h"

#include "common/error.h"
#include "strategies/dp/dp_strategy.h"
#include "strategies/single_strategy.h"
#ifdef GRADSYNC_HAVE_NCCL
#include "strategies/dp/dp_gpu_strategy.h"
#include "model/cuda/cuda_device.h"
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

const std::vector<std::string>& strategy_names() {
  static const std::vector<std::string> names = {"single", "dp", "allreduce", "ps"};
  return names;
}

std::vector<std::unique_ptr<SyncStrategy>> make_strategies(const StrategyOptions& options) {
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
    if (options.device >= 0) return make_dp_on_gpus(options);
    return make_dp_group(options.workers, options.sgd, options.timeout, options.link);
  }
  if (options.name == "allreduce" || options.name == "ps") {
    throw ConfigError(
        "strategy", "strategy",
        "`" + options.name + "` runs one process per rank (gradsync worker), not in-process");
  }
  std::string valid;
  for (const auto& name : strategy_names()) valid += (valid.empty() ? "" : ", ") + name;
  throw ConfigError("strategy", "strategy",
                    "unknown strategy '" + options.name + "' (valid: " + valid + ")");
}

}  // namespace gradsync
