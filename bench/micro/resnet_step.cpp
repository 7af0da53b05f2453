// The ResNet's training step (model/resnet/): forward and backward of ResNet-8 (width 16, one
// block per stage) on 28x28x1 images, items = samples, so items_per_second is samples/s, and
// GFLOP/s counts the step's products (ResNet::step_flop). On one thread, as its PyTorch peer
// scripts/resnet_peer.py (same network, batch, one thread):
//   build/bin/gradsync_micro_bench --benchmark_filter=ResNet
//   /usr/bin/python3 scripts/resnet_peer.py --batch 64
#include <benchmark/benchmark.h>

#include <numeric>
#include <vector>

#include "common/random.h"
#include "model/resnet/resnet.h"

namespace {

void BM_ResNetForwardBackward(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  constexpr int kPool = 8;  // batches cycled through, as the peer's pool
  gradsync::Dataset data;
  data.size = std::int64_t{batch} * kPool;
  data.dim = 28 * 28;
  data.classes = 10;
  gradsync::SplitMix64 rng(3);
  data.features.resize(static_cast<std::size_t>(data.size * data.dim));
  for (float& x : data.features) x = static_cast<float>(rng.normal());
  for (std::int64_t i = 0; i < data.size; ++i) data.labels.push_back(std::int32_t(rng.below(10)));
  gradsync::ResNet net({}, batch);
  net.init_params(1);
  std::vector<std::int64_t> indices(static_cast<std::size_t>(data.size));
  std::iota(indices.begin(), indices.end(), 0);
  std::int64_t i = 0;
  for (auto _ : state) {
    const std::span<const std::int64_t> b(indices.data() + (i++ % kPool) * batch,
                                          static_cast<std::size_t>(batch));
    benchmark::DoNotOptimize(net.forward_backward(data, b));
  }
  state.SetItemsProcessed(state.iterations() * batch);
  state.counters["GFLOP/s"] = benchmark::Counter(
      net.step_flop(batch) * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ResNetForwardBackward)->Arg(64)->Arg(128)->Unit(benchmark::kMillisecond);

}  // namespace
