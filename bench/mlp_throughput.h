// `gradsync bench mlp`: training throughput of the CPU MLP on one thread (or, with
// device "gpu", of the CUDA MLP on one GPU), measured the way bench/torch_mlp.py
// measures PyTorch: a fixed pool of random batches already in memory (on the GPU: uploaded
// once), then forward + backward + SGD-with-momentum steps for a fixed time.
#pragma once

#include <cstdint>
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
};

// Returns the result line: "gradsync: samples/s=... steps=... seconds=... batch=... threads=1
// gemm=avx512|eigen", or on a GPU "gradsync: samples/s=... device=cuda:0 gpu=<name>"
// (or one JSON object with options.json). device "gpu" in a build without CUDA, or without a
// visible GPU, throws a one-line ConfigError naming --device.
std::string run_mlp_bench(const MlpBenchOptions& options);

// Shared by the CPU and GPU benchmarks. The pool: 64 batches of random samples (seed 7), enough
// that the inputs do not all sit in cache, as with real data.
Dataset make_bench_pool(const MlpBenchOptions& options);
struct TimedSteps {
  std::int64_t steps = 0;
  double seconds = 0;
};
// warmup_steps untimed steps, then forward + backward + optimizer steps over the pool's batches
// in turn for at least `seconds`; the clock is read every 16 steps only.
TimedSteps time_training_steps(Model& model, Optimizer& optimizer, const Dataset& pool,
                               const MlpBenchOptions& options);

}  // namespace gradsync
