#include "bench/mlp_throughput.h"

#include <cstdio>
#include <numeric>

#include "common/random.h"
#include "common/stopwatch.h"
#include "model/cpu_gemm.h"
#include "model/dataset.h"
#include "model/mlp.h"
#include "model/optimizer/sgd.h"
#include "bench/gpu_mlp_throughput.h"
#include "common/error.h"

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
  std::vector<std::int64_t> indices(static_cast<std::size_t>(pool.size));
  std::iota(indices.begin(), indices.end(), 0);
  std::int64_t step = 0;
  auto one_step = [&] {
    const std::span<const std::int64_t> batch(
        indices.data() + (step % kPoolBatches) * options.batch,
        static_cast<std::size_t>(options.batch));
    model.forward_backward(pool, batch);
    optimizer.step(model.params(), model.grads());
    ++step;
  };
  // The warm-up also fills caches (on a GPU: uploads the pool, loads cuBLAS's kernels).
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

std::string run_mlp_bench(const MlpBenchOptions& options) {
  if (options.device == "gpu") return run_gpu_mlp_bench(options);
  if (options.device != "cpu") {
    throw ConfigError("bench", "--device", "'" + options.device + "' (valid: cpu, gpu)");
  }
  const Dataset pool = make_bench_pool(options);
  std::vector<int> widths = {options.input};
  widths.insert(widths.end(), options.hidden.begin(), options.hidden.end());
  widths.push_back(options.classes);
  Mlp model(widths, options.batch);
  model.init_params(1);
  Sgd sgd(model.param_count(), SgdOptions{0.05, 0.9, 0.0});
  const auto [step, elapsed] = time_training_steps(model, sgd, pool, options);
  const double samples_per_s = static_cast<double>(step * options.batch) / elapsed;
  // Which GEMM ran matters for reading the figure: the AVX-512 kernel or Eigen's fallback.
  const char* kernel = gemm_uses_avx512() ? "avx512" : "eigen";
  char line[256];
  if (options.json) {
    std::snprintf(line, sizeof line,
                  "{\"impl\": \"gradsync\", \"samples_per_s\": %.1f, \"steps\": %lld, "
                  "\"seconds\": %.3f, \"batch\": %d, \"threads\": 1, \"gemm\": \"%s\"}",
                  samples_per_s, static_cast<long long>(step), elapsed, options.batch, kernel);
  } else {
    std::snprintf(line, sizeof line,
                  "gradsync: samples/s=%.1f steps=%lld seconds=%.3f batch=%d threads=1 gemm=%s",
                  samples_per_s, static_cast<long long>(step), elapsed, options.batch, kernel);
  }
  return line;
}

}  // namespace gradsync
