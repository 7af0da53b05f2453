// The CUDA MLP and DeviceSgd against their CPU counterparts: the same parameters, batch and
// options must give the same loss, gradients and updates up to float rounding; and train_step's
// CUDA graphs against the eager step, bit for bit. Every GPU case skips (and passes) where no
// GPU is visible.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

#include "../support/compare.h"
#include "gpu_test_support.h"
#include "model/cuda/cuda_check.h"
#include "model/cuda/cuda_handles.h"
#include "model/cuda/cuda_mlp.h"
#include "model/cuda/device_buffer.h"
#include "model/cuda/device_sgd.h"
#include "model/make_optimizer.h"
#include "model/mlp.h"
#include "model/optimizer/sgd.h"

namespace {

using gradsync::testing::max_relative_difference;
using gradsync::testing::random_dataset;

std::vector<float> host_grads(gradsync::CudaMlp& model) {
  std::vector<float> out(model.param_count());
  model.copy_grads_to_host(out);
  return out;
}

std::vector<float> host_params(gradsync::Model& model) {
  std::vector<float> out(model.param_count());
  model.copy_params_to_host(out);
  return out;
}

std::vector<float> host_momentum(const gradsync::DeviceSgd& sgd) {
  std::vector<float> out(sgd.size());
  sgd.save_state(out);
  return out;
}

// Copies on a stream of ours, then waits for it: a plain cudaMemcpy from pageable memory may
// return before its DMA lands, and a kernel on another non-blocking stream would not wait.
void upload(gradsync::cuda::DeviceBuffer<float>& to, const std::vector<float>& from) {
  REQUIRE(from.size() == to.size());
  gradsync::cuda::Stream stream = gradsync::cuda::make_stream();
  GRADSYNC_CUDA_CHECK(
      cudaMemcpyAsync(to.data(), from.data(), to.bytes(), cudaMemcpyHostToDevice, stream.get()));
  GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
}

std::vector<float> download(const gradsync::cuda::DeviceBuffer<float>& from) {
  std::vector<float> to(from.size());
  gradsync::cuda::Stream stream = gradsync::cuda::make_stream();
  GRADSYNC_CUDA_CHECK(
      cudaMemcpyAsync(to.data(), from.data(), from.bytes(), cudaMemcpyDeviceToHost, stream.get()));
  GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  return to;
}

// `count` indices into a dataset of `size`, starting at *next and walking by a stride that is
// prime to it, so each step's batch is different and unordered.
std::vector<std::int64_t> next_batch(std::int64_t* next, int count, std::int64_t size) {
  std::vector<std::int64_t> batch(static_cast<std::size_t>(count));
  for (std::int64_t& i : batch) i = ((*next)++ * 7) % size;
  return batch;
}

}  // namespace

TEST_CASE("cuda mlp: the same seed gives bit-identical initial parameters") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  gradsync::Mlp cpu({20, 16, 5}, 8);
  gradsync::CudaMlp gpu({20, 16, 5}, 8, 0);
  cpu.init_params(42);
  gpu.init_params(42);
  CHECK(gpu.device() == 0);
  CHECK(gpu.layers().size() == cpu.layers().size());
  CHECK(host_params(gpu) == std::vector<float>(cpu.params().begin(), cpu.params().end()));
}

TEST_CASE("cuda mlp: CPU and GPU gradients agree (max relative difference <= 1e-4)") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  const gradsync::Dataset data = random_dataset(512, 784, 10, 5);
  const std::vector<int> widths = {784, 256, 256, 10};
  gradsync::Mlp cpu(widths, 256);
  gradsync::CudaMlp gpu(widths, 256, 0);
  cpu.init_params(9);
  gpu.init_params(9);
  std::vector<std::int64_t> batch(256);
  std::iota(batch.begin(), batch.end(), 100);

  SUBCASE("one batch") {
    const double cpu_loss = cpu.forward_backward(data, batch);
    const double gpu_loss = gpu.forward_backward(data, batch);
    CHECK(gpu_loss == doctest::Approx(cpu_loss).epsilon(1e-5));
    const std::vector<float> cpu_grads(cpu.grads().begin(), cpu.grads().end());
    const double diff = max_relative_difference(host_grads(gpu), cpu_grads, cpu.layers());
    MESSAGE("max relative gradient difference " << diff);
    CHECK(diff <= 1e-4);
  }
  SUBCASE("two accumulated micro-batches with grad_scale 1/2") {
    const std::span<const std::int64_t> first(batch.data(), 128), second(batch.data() + 128, 128);
    cpu.forward_backward(data, first, 0.5f, false);
    cpu.forward_backward(data, second, 0.5f, true);
    gpu.forward_backward(data, first, 0.5f, false);
    gpu.forward_backward(data, second, 0.5f, true);
    const std::vector<float> cpu_grads(cpu.grads().begin(), cpu.grads().end());
    CHECK(max_relative_difference(host_grads(gpu), cpu_grads, cpu.layers()) <= 1e-4);
  }
  SUBCASE("evaluation") {
    const gradsync::Evaluation a = cpu.evaluate(data);
    const gradsync::Evaluation b = gpu.evaluate(data);
    CHECK(b.samples == a.samples);
    CHECK(b.loss == doctest::Approx(a.loss).epsilon(1e-5));
    CHECK(b.accuracy == doctest::Approx(a.accuracy).epsilon(0.002));  // a near-tie may flip
  }
}

TEST_CASE("cuda mlp: gradient ranges are reported last layer first, contiguous") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  const gradsync::Dataset data = random_dataset(16, 6, 4, 1);
  gradsync::CudaMlp gpu({6, 5, 4, 4}, 16, 0);
  gpu.init_params(1);
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  gpu.set_grad_ready_callback([&](std::size_t b, std::size_t e) { ranges.emplace_back(b, e); });
  std::vector<std::int64_t> batch = {0, 3, 5, 7};
  gpu.forward_backward(data, batch);
  REQUIRE(ranges.size() == 3);
  CHECK(ranges.front().second == gpu.param_count());
  CHECK(ranges.back().first == 0);
  for (std::size_t i = 1; i < ranges.size(); ++i) CHECK(ranges[i].second == ranges[i - 1].first);
}

TEST_CASE("cuda mlp: prepare calls back nobody and changes no step's result") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  const gradsync::Dataset data = random_dataset(64, 6, 4, 3);
  gradsync::CudaMlp cold({6, 5, 4, 4}, 16, 0), warm({6, 5, 4, 4}, 16, 0);
  cold.init_params(7);
  warm.init_params(7);
  int calls = 0;
  warm.set_grad_ready_callback([&](std::size_t, std::size_t) { ++calls; });
  warm.prepare(data);
  CHECK(calls == 0);
  CHECK(host_params(warm) == host_params(cold));
  CHECK(host_grads(warm) == std::vector<float>(warm.param_count(), 0.0f));
  const std::vector<std::int64_t> batch = {9, 1, 40, 33, 2};
  const double cold_loss = cold.forward_backward(data, batch);
  const double warm_loss = warm.forward_backward(data, batch);
  CHECK(calls == 3);  // the callback is back for real steps
  CHECK(warm_loss == cold_loss);
  CHECK(host_grads(warm) == host_grads(cold));
}

TEST_CASE("cuda mlp: host copies of the parameters round-trip") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  gradsync::CudaMlp gpu({3, 2}, 4, 0);
  std::vector<float> values(gpu.param_count());
  std::iota(values.begin(), values.end(), 1.0f);
  gpu.copy_params_from_host(values);
  CHECK(host_params(gpu) == values);
  std::vector<float> too_short(3);
  CHECK_THROWS_AS(gpu.copy_params_to_host(too_short), gradsync::Error);
}

TEST_CASE("device sgd: matches the host Sgd step for step, and its state round-trips") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  const std::size_t n = 10007;  // not a multiple of any block size
  const gradsync::SgdOptions options{0.05, 0.9, 1e-3};
  gradsync::Sgd cpu(n, options);
  gradsync::DeviceSgd gpu(n, options, 0);
  gradsync::SplitMix64 rng(3);
  std::vector<float> params(n), grads(n);
  for (float& p : params) p = float(rng.normal());
  gradsync::cuda::DeviceBuffer<float> device_params(n), device_grads(n);
  upload(device_params, params);
  for (int step = 0; step < 4; ++step) {
    for (float& g : grads) g = float(rng.normal());
    upload(device_grads, grads);
    cpu.step(params, grads);
    gpu.step(device_params.span(), device_grads.span());
  }
  const std::vector<float> from_gpu = download(device_params);
  const double diff = gradsync::testing::tensor_relative_difference(from_gpu, params);
  MESSAGE("max relative parameter difference after 4 steps " << diff);
  CHECK(diff <= 1e-6);
  CHECK(gpu.steps_taken() == 4);

  std::vector<float> momentum(n), cpu_momentum(n);
  gpu.save_state(momentum);
  cpu.save_state(cpu_momentum);
  CHECK(gradsync::testing::tensor_relative_difference(momentum, cpu_momentum) <= 1e-6);
  gradsync::DeviceSgd resumed(n, options, 0);
  resumed.load_state(momentum, gpu.steps_taken());
  std::vector<float> again(n);
  resumed.save_state(again);
  CHECK(again == momentum);
  CHECK(resumed.steps_taken() == 4);
}

TEST_CASE("device sgd: make_sgd on a device gives DeviceSgd") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  auto opt = gradsync::make_sgd(16, gradsync::SgdOptions{}, 0);
  CHECK(dynamic_cast<gradsync::DeviceSgd*>(opt.get()) != nullptr);
}

TEST_CASE("cuda mlp: train_step's CUDA graphs give the eager step's results bit for bit") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  const gradsync::Dataset data = random_dataset(512, 784, 10, 11);
  const gradsync::Dataset other = random_dataset(300, 784, 10, 12);
  const std::vector<int> widths = {784, 256, 256, 10};
  const gradsync::SgdOptions options{0.05, 0.9, 1e-4};
  gradsync::CudaMlp eager(widths, 256, 0);
  gradsync::CudaMlp graphed(widths, 256, 0);
  eager.init_params(5);
  graphed.init_params(5);
  const std::vector<float> initial = host_params(eager);
  gradsync::DeviceSgd eager_sgd(eager.param_count(), options, 0);
  gradsync::DeviceSgd graphed_sgd(graphed.param_count(), options, 0);

  // Step 0 runs without a graph (the first update sets the momentum); 1 captures (data, 256),
  // 2 replays it, 3 captures an epoch tail (data, 100), 4 replays (data, 256) from the cache,
  // 5 captures (other, 256) and evicts the tail, 6 captures (data, 37) and evicts (data, 256).
  const std::vector<std::pair<const gradsync::Dataset*, int>> steps = {
      {&data, 256}, {&data, 256},  {&data, 256}, {&data, 100},
      {&data, 256}, {&other, 256}, {&data, 37}};
  std::int64_t next = 0;
  for (std::size_t k = 0; k < steps.size(); ++k) {
    const auto [set, size] = steps[k];
    const std::vector<std::int64_t> batch = next_batch(&next, size, set->size);
    const double eager_loss = eager.forward_backward(*set, batch);
    eager_sgd.step(eager.params(), eager.grads());
    const double graphed_loss = graphed.train_step(*set, batch, graphed_sgd);
    INFO("step " << k);
    CHECK(graphed_loss == eager_loss);
    CHECK(graphed_sgd.steps_taken() == eager_sgd.steps_taken());
  }
  CHECK(graphed.graphs_captured() == 4);
  const std::vector<float> trained = host_params(graphed);
  CHECK(trained != initial);  // the steps did move the parameters
  CHECK(trained == host_params(eager));
  CHECK(host_grads(graphed) == host_grads(eager));
  CHECK(host_momentum(graphed_sgd) == host_momentum(eager_sgd));

  // The eager path still works on a model that has graphs, and agrees with it afterwards.
  const std::vector<std::int64_t> batch = next_batch(&next, 256, data.size);
  const double a = eager.forward_backward(data, batch);
  const double b = graphed.forward_backward(data, batch);
  CHECK(a == b);
  CHECK(host_grads(graphed) == host_grads(eager));
}

TEST_CASE("cuda mlp: train_step refuses a gradient callback and a foreign optimizer") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  const gradsync::Dataset data = random_dataset(16, 6, 4, 1);
  gradsync::CudaMlp gpu({6, 5, 4}, 16, 0);
  gpu.init_params(1);
  const std::vector<std::int64_t> batch = {0, 1, 2, 3};
  gradsync::DeviceSgd wrong_size(gpu.param_count() + 1, gradsync::SgdOptions{}, 0);
  CHECK_THROWS_AS(gpu.train_step(data, batch, wrong_size), gradsync::Error);
  gradsync::DeviceSgd sgd(gpu.param_count(), gradsync::SgdOptions{}, 0);
  gpu.set_grad_ready_callback([](std::size_t, std::size_t) {});
  CHECK_THROWS_AS(gpu.train_step(data, batch, sgd), gradsync::Error);
  CHECK(sgd.steps_taken() == 0);
  gpu.set_grad_ready_callback(nullptr);
  CHECK(std::isfinite(gpu.train_step(data, batch, sgd)));
  CHECK(sgd.steps_taken() == 1);
}

TEST_CASE("mlp: a NaN in a hidden layer reaches the loss, on the CPU and on the GPU") {
  // ReLU as fmaxf(x, 0) would turn the NaN into 0 and hide the divergence.
  const gradsync::Dataset data = random_dataset(8, 6, 4, 2);
  const std::vector<int> widths = {6, 5, 4};
  const std::vector<std::int64_t> batch = {0, 1, 2, 3};
  gradsync::Mlp cpu(widths, 8);
  cpu.init_params(3);
  std::vector<float> params(cpu.params().begin(), cpu.params().end());
  params[cpu.layers()[0].bias_offset] = std::numeric_limits<float>::quiet_NaN();
  std::copy(params.begin(), params.end(), cpu.params().begin());
  CHECK(std::isnan(cpu.forward_backward(data, batch)));

  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  gradsync::CudaMlp gpu(widths, 8, 0);
  gpu.copy_params_from_host(params);
  CHECK(std::isnan(gpu.forward_backward(data, batch)));
  CHECK(std::isnan(gpu.evaluate(data).loss));
}
