// Micro-benchmarks of the hot loop: one MLP training step (forward, backward) and one SGD
// update, with items = samples and bytes = parameter bytes touched, so the rates read directly.
//   build/bin/gradsync_micro_bench --benchmark_filter=Mlp
#include <benchmark/benchmark.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "common/random.h"
#include "model/mlp.h"
#include "model/optimizer/sgd.h"

namespace {

gradsync::Dataset random_data(std::int64_t n, int dim, int classes) {
  gradsync::Dataset d;
  d.size = n;
  d.dim = dim;
  d.classes = classes;
  gradsync::SplitMix64 rng(3);
  d.features.resize(static_cast<std::size_t>(n * dim));
  for (float& x : d.features) x = static_cast<float>(rng.normal());
  for (std::int64_t i = 0; i < n; ++i) d.labels.push_back(std::int32_t(rng.below(classes)));
  return d;
}

void BM_MlpForwardBackward(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  const gradsync::Dataset data = random_data(batch * 16, 784, 10);
  gradsync::Mlp mlp({784, 256, 256, 10}, batch);
  mlp.init_params(1);
  std::vector<std::int64_t> indices(static_cast<std::size_t>(data.size));
  std::iota(indices.begin(), indices.end(), 0);
  std::int64_t i = 0;
  for (auto _ : state) {
    const std::span<const std::int64_t> b(indices.data() + (i++ % 16) * batch,
                                          static_cast<std::size_t>(batch));
    benchmark::DoNotOptimize(mlp.forward_backward(data, b));
  }
  state.SetItemsProcessed(state.iterations() * batch);
  // Forward 2*B*P flops, backward ~4*B*P less the input gradient of the first layer.
  const double flops = 6.0 * batch * double(mlp.param_count()) - 2.0 * batch * 784 * 256;
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MlpForwardBackward)->Arg(64)->Arg(256)->Unit(benchmark::kMicrosecond);

void BM_SgdStep(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<float> params(n, 1.f), grads(n, 0.01f);
  gradsync::Sgd sgd(n, {0.05, 0.9, 1e-4});
  for (auto _ : state) {
    sgd.step(params, grads);
    benchmark::ClobberMemory();
  }
  // Reads params, grads, velocity; writes params, velocity.
  state.SetBytesProcessed(state.iterations() * std::int64_t(n * sizeof(float) * 5));
}
BENCHMARK(BM_SgdStep)->Arg(269322)->Arg(25'600'000)->Unit(benchmark::kMicrosecond);

// A plain copy of N bytes on one core: the memory-bandwidth yardstick beside the shared-memory
// all-reduce (scripts/bench-shm-vs-mpi.sh), which copies each rank's buffer in and the result
// out. bytes = bytes copied (read once, written once).
void BM_MemoryCopy(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<char> from(n, 1), to(n, 0);
  for (auto _ : state) {
    std::memcpy(to.data(), from.data(), n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * std::int64_t(n));
}
BENCHMARK(BM_MemoryCopy)
    ->RangeMultiplier(4)
    ->Range(64 << 10, 64 << 20)
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
