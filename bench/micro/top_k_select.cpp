// Top-k's own compute per bucket (common/compression/top_k_codec.h): error feedback, the
// choice of the k largest magnitudes, and the residual, on a bucket the size of the quickstart
// MLP's first layer (784 x 256 + 256 = 200,960 values), at 0.1%, 1% (comm.topk_ratio's default)
// and 10%. BM_TopKSelectFullSort is the same choice made the plain way (nth_element over every
// magnitude), the yardstick for the sampled candidates. items = buckets.
//   build/bin/gradsync_micro_bench --benchmark_filter='TopK'
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "common/compression/top_k_codec.h"
#include "common/random.h"

namespace {

constexpr std::size_t kBucket = 784 * 256 + 256;

std::vector<float> gradient() {
  std::vector<float> grad(kBucket);
  gradsync::SplitMix64 rng(7);
  for (float& g : grad) g = static_cast<float>(rng.normal()) * 1e-3f;
  return grad;
}

double ratio_of(const benchmark::State& state) { return double(state.range(0)) / 1000.0; }

void BM_TopKSelect(benchmark::State& state) {
  const std::vector<float> grad = gradient();
  gradsync::compression::TopKCodec codec(kBucket);
  gradsync::compression::SparseGradient sent;
  for (auto _ : state) {
    codec.select(grad, ratio_of(state), sent);
    benchmark::DoNotOptimize(sent.indices.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TopKSelect)->Arg(1)->Arg(10)->Arg(100)->Unit(benchmark::kMicrosecond);

void BM_TopKSelectFullSort(benchmark::State& state) {
  const std::vector<float> grad = gradient();
  const std::size_t k = gradsync::compression::TopKCodec::k_for(kBucket, ratio_of(state));
  std::vector<float> magnitudes(kBucket);
  for (auto _ : state) {
    for (std::size_t i = 0; i < kBucket; ++i) magnitudes[i] = std::fabs(grad[i]);
    const auto kth = magnitudes.begin() + static_cast<std::ptrdiff_t>(k - 1);
    std::nth_element(magnitudes.begin(), kth, magnitudes.end(), std::greater<float>());
    benchmark::DoNotOptimize(*kth);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TopKSelectFullSort)->Arg(1)->Arg(10)->Arg(100)->Unit(benchmark::kMicrosecond);

}  // namespace
