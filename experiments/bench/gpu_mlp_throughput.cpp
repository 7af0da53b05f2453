#include "experiments/bench/gpu_mlp_throughput.h"

#include <cstdio>
#include <numeric>
#include <vector>

#include "common/error.h"
#ifdef GRADSYNC_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "common/random.h"
#include "common/stopwatch.h"
#include "worker/cuda/cuda_check.h"
#include "worker/cuda/cuda_device.h"
#include "worker/cuda/cuda_mlp.h"
#include "worker/cuda/device_sgd.h"
#include "worker/dataset.h"
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

  // The CPU benchmark's pool: 64 batches of random samples, drawn the same way.
  constexpr int kPoolBatches = 64;
  Dataset pool;
  pool.name = "bench";
  pool.dim = options.input;
  pool.classes = options.classes;
  pool.size = static_cast<std::int64_t>(kPoolBatches) * options.batch;
  pool.features.resize(static_cast<std::size_t>(pool.size) * pool.dim);
  pool.labels.resize(static_cast<std::size_t>(pool.size));
  SplitMix64 rng(7);
  for (float& x : pool.features) x = static_cast<float>(rng.normal());
  for (auto& y : pool.labels) y = static_cast<std::int32_t>(rng.below(options.classes));

  std::vector<int> widths = {options.input};
  widths.insert(widths.end(), options.hidden.begin(), options.hidden.end());
  widths.push_back(options.classes);
  CudaMlp model(widths, options.batch, options.gpu);
  model.init_params(1);
  DeviceSgd sgd(model.param_count(), SgdOptions{0.05, 0.9, 0.0}, options.gpu);
  std::vector<std::int64_t> indices(static_cast<std::size_t>(pool.size));
  std::iota(indices.begin(), indices.end(), 0);

  std::int64_t step = 0;
  auto one_step = [&] {
    const std::span<const std::int64_t> batch(
        indices.data() + (step % kPoolBatches) * options.batch,
        static_cast<std::size_t>(options.batch));
    model.forward_backward(pool, batch);
    sgd.step(model.params(), model.grads());
    ++step;
  };
  // The warm-up also uploads the pool and lets cuBLAS pick and load its kernels.
  for (int i = 0; i < options.warmup_steps; ++i) one_step();
  step = 0;
  Stopwatch clock;
  double elapsed = 0;
  while (elapsed < options.seconds) {
    for (int i = 0; i < 16; ++i) one_step();
    elapsed = clock.seconds();
  }
  const double samples_per_s = static_cast<double>(step * options.batch) / elapsed;
  char line[512];
  if (options.json) {
    std::snprintf(line, sizeof line,
                  "{\"impl\": \"gradsync\", \"samples_per_s\": %.1f, \"steps\": %lld, "
                  "\"seconds\": %.3f, \"batch\": %d, \"device\": \"cuda:%d\", \"gpu\": \"%s\"}",
                  samples_per_s, static_cast<long long>(step), elapsed, options.batch,
                  options.gpu, properties.name);
  } else {
    std::snprintf(line, sizeof line,
                  "gradsync: samples/s=%.1f steps=%lld seconds=%.3f batch=%d device=cuda:%d "
                  "gpu=%s",
                  samples_per_s, static_cast<long long>(step), elapsed, options.batch,
                  options.gpu, properties.name);
  }
  return line;
}

#else

std::string run_gpu_mlp_bench(const MlpBenchOptions& /*options*/) {
  throw ConfigError("bench", "--device", "gpu needs a gradsync built with CUDA (this one is not)");
}

#endif

}  // namespace gradsync
