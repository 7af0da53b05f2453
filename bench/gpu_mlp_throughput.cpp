#include "bench/gpu_mlp_throughput.h"

#include <cstdio>
#include <numeric>
#include <span>
#include <vector>

#include "common/error.h"
#ifdef GRADSYNC_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "common/random.h"
#include "common/stopwatch.h"
#include "model/cuda/cuda_check.h"
#include "model/cuda/cuda_device.h"
#include "model/cuda/cuda_mlp.h"
#include "model/cuda/device_sgd.h"
#include "model/dataset.h"
#endif

namespace gradsync {

#ifdef GRADSYNC_HAVE_CUDA

std::string run_gpu_mlp_bench(const MlpBenchOptions& options) {
  const int visible = cuda::cuda_device_count();
  if (visible == 0) {
    throw ConfigError("bench", "--device",
                      "gpu: no CUDA device is visible (" + cuda::no_device_reason() + ")");
  }
  if (options.gpu < 0 || options.gpu >= visible) {
    throw ConfigError("bench", "--gpu",
                      "CUDA device " + std::to_string(options.gpu) + " is not visible (" +
                          std::to_string(visible) + " device(s))");
  }
  cudaDeviceProp properties{};
  GRADSYNC_CUDA_CHECK(cudaGetDeviceProperties(&properties, options.gpu));

  const Dataset pool = make_bench_pool(options);
  std::vector<int> widths = {options.input};
  widths.insert(widths.end(), options.hidden.begin(), options.hidden.end());
  widths.push_back(options.classes);
  CudaMlp model(widths, options.batch, options.gpu);
  model.init_params(1);
  DeviceSgd sgd(model.param_count(), SgdOptions{0.05, 0.9, 0.0}, options.gpu);
  // Each step reads its loss back, so the clock never runs ahead of the GPU.
  const TimedSteps timed =
      options.cuda_graphs
          ? time_training_steps(
                [&](std::span<const std::int64_t> batch) { model.train_step(pool, batch, sgd); },
                pool, options)
          : time_training_steps(model, sgd, pool, options);
  const auto [step, elapsed] = timed;
  const double samples_per_s = static_cast<double>(step * options.batch) / elapsed;
  char line[512];
  if (options.json) {
    std::snprintf(line, sizeof line,
                  "{\"impl\": \"gradsync\", \"samples_per_s\": %.1f, \"steps\": %lld, "
                  "\"seconds\": %.3f, \"batch\": %d, \"device\": \"cuda:%d\", \"gpu\": \"%s\", "
                  "\"graphs\": %s}",
                  samples_per_s, static_cast<long long>(step), elapsed, options.batch, options.gpu,
                  properties.name, options.cuda_graphs ? "true" : "false");
  } else {
    // graphs= before gpu=, which runs to the end of the line (a GPU name has spaces).
    std::snprintf(line, sizeof line,
                  "gradsync: samples/s=%.1f steps=%lld seconds=%.3f batch=%d device=cuda:%d "
                  "graphs=%s gpu=%s",
                  samples_per_s, static_cast<long long>(step), elapsed, options.batch, options.gpu,
                  options.cuda_graphs ? "on" : "off", properties.name);
  }
  return line;
}

#else

std::string run_gpu_mlp_bench(const MlpBenchOptions& /*options*/) {
  throw ConfigError("bench", "--device", "gpu needs a gradsync built with CUDA (this one is not)");
}

#endif

}  // namespace gradsync
