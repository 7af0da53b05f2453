#include "bench/timed_steps.h"

#include <numeric>
#include <span>

#include "common/random.h"
#include "common/stopwatch.h"

namespace gradsync {

namespace {
constexpr int kPoolBatches = 64;
}  // namespace

Dataset make_bench_pool(const MlpBenchOptions& options) {
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
  return pool;
}

TimedSteps time_training_steps(Model& model, Optimizer& optimizer, const Dataset& pool,
                               const MlpBenchOptions& options) {
  return time_training_steps(
      [&](std::span<const std::int64_t> batch) {
        model.forward_backward(pool, batch);
        optimizer.step(model.params(), model.grads());
      },
      pool, options);
}

TimedSteps time_training_steps(const TrainingStep& train, const Dataset& pool,
                               const MlpBenchOptions& options) {
  std::vector<std::int64_t> indices(static_cast<std::size_t>(pool.size));
  std::iota(indices.begin(), indices.end(), 0);
  std::int64_t step = 0;
  auto one_step = [&] {
    train(std::span<const std::int64_t>(indices.data() + (step % kPoolBatches) * options.batch,
                                        static_cast<std::size_t>(options.batch)));
    ++step;
  };
  // The warm-up also fills caches (on a GPU: uploads the pool, loads cuBLAS's kernels,
  // captures the CUDA graph).
  for (int i = 0; i < options.warmup_steps; ++i) one_step();
  step = 0;
  Stopwatch clock;
  double elapsed = 0;
  // Check the clock every 16 steps only: a clock read per step would be part of the measurement.
  while (elapsed < options.seconds) {
    for (int i = 0; i < 16; ++i) one_step();
    elapsed = clock.seconds();
  }
  return {step, elapsed};
}

}  // namespace gradsync
