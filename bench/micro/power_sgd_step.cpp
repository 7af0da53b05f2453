// PowerSGD's own compute per training step (common/compression/power_sgd_codec.h): the four
// phases of every weight matrix of the quickstart MLP (784-256-256-10, as row-major in x out:
// 784 x 256, 256 x 256, 256 x 10) at rank 4, with no communication between them, so the figure
// is what PowerSGD adds to a step beside the MLP's own (BM_MlpForwardBackward/64). items = steps.
//   build/bin/gradsync_micro_bench --benchmark_filter='PowerSgd|Mlp'
#include <benchmark/benchmark.h>

#include <vector>

#include "common/compression/power_sgd_codec.h"
#include "common/random.h"

namespace {

void BM_PowerSgdStep(benchmark::State& state) {
  const std::size_t rank = static_cast<std::size_t>(state.range(0));
  struct Shape {
    std::size_t rows, cols;
  };
  const Shape shapes[] = {{784, 256}, {256, 256}, {256, 10}};
  std::vector<gradsync::compression::PowerSgdCodec> codecs;
  std::vector<std::vector<float>> grads;
  gradsync::SplitMix64 rng(5);
  for (const Shape s : shapes) {
    codecs.emplace_back(s.rows, s.cols, rank, 11);
    grads.emplace_back(s.rows * s.cols);
    for (float& g : grads.back()) g = static_cast<float>(rng.normal()) * 1e-3f;
  }
  // Each step works on what the last left (the approximation): the same work on other values.
  for (auto _ : state) {
    for (std::size_t k = 0; k < codecs.size(); ++k) {
      codecs[k].compute_p(grads[k]);
      codecs[k].orthonormalize_p();
      codecs[k].compute_q(grads[k]);
      codecs[k].decompress(grads[k]);
    }
    benchmark::DoNotOptimize(grads[0].data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PowerSgdStep)->Arg(1)->Arg(4)->Unit(benchmark::kMicrosecond);

}  // namespace
