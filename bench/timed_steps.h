// What the CPU and the GPU MLP benchmarks (mlp_throughput.h, gpu_mlp_throughput.h) share: their
// options, the pool of batches, and the timed loop of training steps.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/dataset.h"
#include "model/model.h"
#include "model/optimizer/optimizer.h"

namespace gradsync {

struct MlpBenchOptions {
  std::vector<int> hidden = {256, 256};
  int input = 784;
  int classes = 10;
  int batch = 64;
  double seconds = 5.0;
  int warmup_steps = 50;
  bool json = false;
  std::string device = "cpu";  // cpu | gpu
  int gpu = 0;                 // the CUDA ordinal with device "gpu"
  bool cuda_graphs = true;     // device "gpu": each step one CUDA graph (CudaMlp::train_step)
};

// The pool: 64 batches of random samples (seed 7), enough that the inputs do not all sit in
// cache, as with real data.
Dataset make_bench_pool(const MlpBenchOptions& options);
struct TimedSteps {
  std::int64_t steps = 0;
  double seconds = 0;
};
// warmup_steps untimed steps, then forward + backward + optimizer steps over the pool's batches
// in turn for at least `seconds`; the clock is read every 16 steps only.
TimedSteps time_training_steps(Model& model, Optimizer& optimizer, const Dataset& pool,
                               const MlpBenchOptions& options);
// The same loop around any whole training step, given the batch's indices into the pool.
using TrainingStep = std::function<void(std::span<const std::int64_t> batch)>;
TimedSteps time_training_steps(const TrainingStep& train, const Dataset& pool,
                               const MlpBenchOptions& options);

}  // namespace gradsync
