// The CUDA ResNet against the CPU ResNet: the same parameters, batch and options must give the
// same loss, gradients, running statistics and evaluation up to float rounding, and report the
// same gradient ranges. Every GPU case skips (and passes) where no GPU is visible, and fails
// instead under GRADSYNC_REQUIRE_GPU=1 (scripts/gpu-check.sh); the refusals of make_model run
// everywhere the build has CUDA.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "../support/compare.h"
#include "common/config.h"
#include "common/error.h"
#include "gpu_test_support.h"
#include "model/cuda/cuda_resnet.h"
#include "model/resnet/resnet.h"
#include "worker/model_factory.h"

namespace {

using gradsync::testing::random_dataset;
using gradsync::testing::tensor_relative_difference;
using Ranges = std::vector<std::pair<std::size_t, std::size_t>>;

constexpr int kBatch = 32;

std::vector<float> host_grads(gradsync::CudaResNet& model) {
  std::vector<float> out(model.param_count());
  model.copy_grads_to_host(out);
  return out;
}

std::vector<float> host_params(gradsync::Model& model) {
  std::vector<float> out(model.param_count());
  model.copy_params_to_host(out);
  return out;
}

std::vector<float> to_vector(std::span<const float> values) {
  return {values.begin(), values.end()};
}

// The worst difference over the layers (W, gamma and beta of a convolution and its norm; W and
// b of the linear layer): max |gpu - cpu| / max |cpu| within each layer's range.
double max_layer_difference(gradsync::CudaResNet& gpu, gradsync::ResNet& cpu) {
  const std::vector<float> g = host_grads(gpu);
  const std::span<const float> c = cpu.grads();
  double worst = 0;
  for (const gradsync::ResNet::Layer& layer : cpu.layers()) {
    const std::size_t n = layer.end - layer.begin;
    worst = std::max(worst,
                     tensor_relative_difference(std::span<const float>(g).subspan(layer.begin, n),
                                                c.subspan(layer.begin, n)));
  }
  return worst;
}

std::vector<std::int64_t> batch_from(std::int64_t first, int count, std::int64_t size) {
  std::vector<std::int64_t> batch(static_cast<std::size_t>(count));
  for (int j = 0; j < count; ++j) batch[static_cast<std::size_t>(j)] = (first + 7 * j) % size;
  return batch;
}

std::string config_error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const gradsync::ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("cuda resnet: make_model refuses what the GPU ResNet does not support, naming the key") {
  gradsync::Config config;
  config.name = "presets/x.yaml";
  config.device = "gpu";
  config.model.kind = "resnet";
  config.strategy = "zero";
  const std::string zero = config_error_of([&] { gradsync::make_model(config, {784, 10}, 8, 0); });
  MESSAGE("zero -> " << zero);
  CHECK(zero.find("presets/x.yaml: strategy:") == 0);
  CHECK(zero.find("use device: cpu") != std::string::npos);
  CHECK(zero.find('\n') == std::string::npos);
  // dp and allreduce carry the running statistics through a device buffer (buffer_staging.h);
  // without a GPU make_model refuses the device itself.
  if (gradsync::visible_gpus() == 0) return;
  for (const char* strategy : {"dp", "allreduce"}) {
    config.strategy = strategy;
    CHECK_MESSAGE(config_error_of([&] {
                    gradsync::make_model(config, {784, 10}, 8, 0);
                  }).empty(),
                  strategy);
  }
}

TEST_CASE("cuda resnet: the same seed gives bit-identical parameters, buffers and layout") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  const gradsync::ResNetShape shape{.blocks_per_stage = 2, .stage_width = 8};
  gradsync::ResNet cpu(shape, 4);
  gradsync::CudaResNet gpu(shape, 4, 0);
  cpu.init_params(42);
  gpu.init_params(42);
  CHECK(gpu.device() == 0);
  CHECK(gpu.param_count() == cpu.param_count());
  CHECK(host_params(gpu) == to_vector(cpu.params()));
  CHECK(to_vector(gpu.buffers()) == to_vector(cpu.buffers()));
  REQUIRE(gpu.layers().size() == cpu.layers().size());
  for (std::size_t i = 0; i < cpu.layers().size(); ++i) {
    CHECK(gpu.layers()[i].name == cpu.layers()[i].name);
    CHECK(gpu.layers()[i].begin == cpu.layers()[i].begin);
    CHECK(gpu.layers()[i].end == cpu.layers()[i].end);
  }
  const auto a = gpu.tensors(), b = cpu.tensors();
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].offset == b[i].offset);
    CHECK(a[i].size() == b[i].size());
  }
  const float* address = gpu.buffers().data();
  gpu.init_params(7);
  CHECK(gpu.buffers().data() == address);  // buffers() stays where it was
}

// Gradients: a ReLU whose input lies within float rounding of 0 passes its gradient on one
// device and not on the other (the products sum in another order), and one such flip moves a
// batch norm's mean gradient, and with it whole layers' gradients, by up to a few 1e-2
// relative. Measured against a product with exact sums: every other step at width 16 and batch
// 32 (10^6 ReLU outputs), a few steps in a hundred at width 4 and batch 8; a wrong index gives
// differences of order 1 on every batch. So the small network is held to 1e-4 on the best of
// three batches and every batch to 0.1 (no flip can do more); the forward quantities (loss,
// running statistics, evaluation) have no kink and are held to 1e-5 throughout.
struct GradientDiffs {
  std::vector<double> diffs;
  void check(const char* what) {
    const double best = *std::min_element(diffs.begin(), diffs.end());
    const double worst = *std::max_element(diffs.begin(), diffs.end());
    MESSAGE(std::string(what) << ": max relative gradient difference, best of 3 batches " << best
                              << ", worst " << worst);
    CHECK(best <= 1e-4);
    CHECK(worst <= 0.1);
  }
};

TEST_CASE(
    "cuda resnet: CPU and GPU gradients agree within 1e-4 (one batch, accumulated, augmented)") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  const gradsync::Dataset data = random_dataset(64, 784, 10, 5);
  constexpr int kSmall = 8;
  for (const int blocks : {1, 2}) {
    CAPTURE(blocks);
    const gradsync::ResNetShape shape{.blocks_per_stage = blocks, .stage_width = 4};
    GradientDiffs one, accumulated, augmented;
    for (int k = 0; k < 3; ++k) {
      const std::vector<std::int64_t> batch = batch_from(3 + 17 * k, kSmall, data.size);
      gradsync::ResNet cpu(shape, kSmall);
      gradsync::CudaResNet gpu(shape, kSmall, 0);
      cpu.init_params(9 + k);
      gpu.init_params(9 + k);

      double cpu_loss = cpu.forward_backward(data, batch);
      double gpu_loss = gpu.forward_backward(data, batch);
      CHECK(gpu_loss == doctest::Approx(cpu_loss).epsilon(1e-5));
      one.diffs.push_back(max_layer_difference(gpu, cpu));

      // Two micro-batches with grad_scale 1/2, the second added to the first.
      const std::span<const std::int64_t> first(batch.data(), kSmall / 2);
      const std::span<const std::int64_t> second(batch.data() + kSmall / 2, kSmall / 2);
      cpu.forward_backward(data, first, 0.5f, false);
      cpu.forward_backward(data, second, 0.5f, true);
      gpu.forward_backward(data, first, 0.5f, false);
      gpu.forward_backward(data, second, 0.5f, true);
      accumulated.diffs.push_back(max_layer_difference(gpu, cpu));

      // Augmented: the same crops and flips as the CPU's.
      const gradsync::Augmentation augmentation{.enabled = true, .padding = 2, .seed = 4};
      cpu.set_augmentation(augmentation);
      gpu.set_augmentation(augmentation);
      cpu.set_epoch(3);
      gpu.set_epoch(3);
      cpu_loss = cpu.forward_backward(data, batch);
      gpu_loss = gpu.forward_backward(data, batch);
      CHECK(gpu_loss == doctest::Approx(cpu_loss).epsilon(1e-5));
      augmented.diffs.push_back(max_layer_difference(gpu, cpu));
    }
    one.check("one batch");
    accumulated.check("accumulated");
    augmented.check("augmented");
  }
}

TEST_CASE(
    "cuda resnet: CPU and GPU agree on loss, running statistics and evaluation (ResNet-8/14)") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  const gradsync::Dataset data = random_dataset(200, 784, 10, 5);
  for (const int blocks : {1, 2}) {
    CAPTURE(blocks);
    const gradsync::ResNetShape shape{.blocks_per_stage = blocks, .stage_width = 16};
    gradsync::ResNet cpu(shape, kBatch);
    gradsync::CudaResNet gpu(shape, kBatch, 0);
    cpu.init_params(9);
    gpu.init_params(9);
    for (int step = 0; step < 3; ++step) {
      const std::vector<std::int64_t> b = batch_from(11 * step, kBatch, data.size);
      const double cpu_loss = cpu.forward_backward(data, b);
      const double gpu_loss = gpu.forward_backward(data, b);
      CHECK(gpu_loss == doctest::Approx(cpu_loss).epsilon(1e-5));
      const double diff = max_layer_difference(gpu, cpu);
      MESSAGE("blocks " << blocks << " step " << step << ": max relative gradient difference "
                        << diff);
      CHECK(diff <= 0.1);  // ReLU flips at most (see above)
    }
    const double stats =
        tensor_relative_difference(to_vector(gpu.buffers()), to_vector(cpu.buffers()));
    MESSAGE("blocks " << blocks << ": running statistics differ by " << stats);
    CHECK(stats <= 1e-5);
    CHECK(to_vector(cpu.buffers()) != std::vector<float>(cpu.buffers().size(), 0.f));
    // 200 samples in chunks of 32: the last chunk is short.
    const gradsync::Evaluation a = cpu.evaluate(data);
    const gradsync::Evaluation b = gpu.evaluate(data);
    CHECK(b.samples == a.samples);
    CHECK(b.loss == doctest::Approx(a.loss).epsilon(1e-5));
    CHECK(std::abs(b.accuracy - a.accuracy) <= 0.011);   // a near-tie may flip a sample or two
    CHECK(host_params(gpu) == to_vector(cpu.params()));  // nothing here changes parameters
  }
}

TEST_CASE("cuda resnet: running statistics written into buffers() are what the next forward uses") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  // What a strategy (dp's copy, DDP's broadcast) or a resume does between steps.
  const gradsync::Dataset data = random_dataset(64, 784, 10, 8);
  const gradsync::ResNetShape shape{.blocks_per_stage = 1, .stage_width = 8};
  gradsync::ResNet cpu(shape, 16);
  gradsync::CudaResNet gpu(shape, 16, 0);
  cpu.init_params(3);
  gpu.init_params(3);
  const gradsync::Evaluation before = gpu.evaluate(data);
  std::vector<float> written(cpu.buffers().size());
  for (std::size_t i = 0; i < written.size(); ++i) written[i] = 0.5f + 0.01f * float(i % 17);
  std::copy(written.begin(), written.end(), cpu.buffers().begin());
  std::copy(written.begin(), written.end(), gpu.buffers().begin());
  const gradsync::Evaluation a = cpu.evaluate(data);
  const gradsync::Evaluation b = gpu.evaluate(data);
  CHECK(b.loss != before.loss);
  CHECK(b.loss == doctest::Approx(a.loss).epsilon(1e-5));
  CHECK(to_vector(gpu.buffers()) == written);  // eval mode moves nothing
  // A train step starts from the written statistics too.
  const std::vector<std::int64_t> batch = batch_from(1, 16, data.size);
  cpu.forward_backward(data, batch);
  gpu.forward_backward(data, batch);
  CHECK(tensor_relative_difference(to_vector(gpu.buffers()), to_vector(cpu.buffers())) <= 1e-5);
}

TEST_CASE("cuda resnet: gradient ranges are the CPU model's, in the same order") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  const gradsync::Dataset data = random_dataset(16, 784, 10, 1);
  const gradsync::ResNetShape shape{.blocks_per_stage = 2, .stage_width = 8};
  gradsync::ResNet cpu(shape, 8);
  gradsync::CudaResNet gpu(shape, 8, 0);
  cpu.init_params(1);
  gpu.init_params(1);
  Ranges cpu_ranges, gpu_ranges;
  cpu.set_grad_ready_callback([&](std::size_t b, std::size_t e) { cpu_ranges.emplace_back(b, e); });
  gpu.set_grad_ready_callback([&](std::size_t b, std::size_t e) { gpu_ranges.emplace_back(b, e); });
  const std::vector<std::int64_t> batch = {0, 3, 5, 7};
  cpu.forward_backward(data, batch);
  gpu.forward_backward(data, batch);
  CHECK(gpu_ranges == cpu_ranges);
  REQUIRE(gpu_ranges.size() == cpu.layers().size());
  CHECK(gpu_ranges.front().second == gpu.param_count());
  CHECK(gpu_ranges.back().first == 0);
}

TEST_CASE("cuda resnet: prepare calls back nobody and changes no step's result") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  const gradsync::Dataset data = random_dataset(40, 784, 10, 3);
  const gradsync::ResNetShape shape{.blocks_per_stage = 1, .stage_width = 8};
  gradsync::CudaResNet cold(shape, 16, 0), warm(shape, 16, 0);
  cold.init_params(7);
  warm.init_params(7);
  int calls = 0;
  warm.set_grad_ready_callback([&](std::size_t, std::size_t) { ++calls; });
  warm.prepare(data);
  CHECK(calls == 0);
  CHECK(to_vector(warm.buffers()) == to_vector(cold.buffers()));
  CHECK(host_grads(warm) == std::vector<float>(warm.param_count(), 0.0f));
  const std::vector<std::int64_t> batch = {9, 1, 30, 33, 2};
  const double cold_loss = cold.forward_backward(data, batch);
  const double warm_loss = warm.forward_backward(data, batch);
  CHECK(calls == static_cast<int>(warm.layers().size()));
  CHECK(warm_loss == cold_loss);
  CHECK(host_grads(warm) == host_grads(cold));
  CHECK(to_vector(warm.buffers()) == to_vector(cold.buffers()));
}

TEST_CASE("cuda resnet: wrong batches and datasets are refused") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  const gradsync::Dataset data = random_dataset(16, 784, 10, 2);
  const gradsync::ResNetShape shape{.blocks_per_stage = 1, .stage_width = 4};
  gradsync::CudaResNet gpu(shape, 4, 0);
  gpu.init_params(1);
  const std::vector<std::int64_t> too_many = {0, 1, 2, 3, 4};
  CHECK_THROWS_AS(gpu.forward_backward(data, too_many), gradsync::Error);
  CHECK_THROWS_AS(gpu.forward_backward(data, std::vector<std::int64_t>{}), gradsync::Error);
  CHECK_THROWS_AS(gpu.forward_backward(data, std::vector<std::int64_t>{0, 16}), gradsync::Error);
  const gradsync::Dataset narrow = random_dataset(16, 100, 10, 2);
  CHECK_THROWS_AS(gpu.forward_backward(narrow, std::vector<std::int64_t>{0, 1}), gradsync::Error);
  CHECK_THROWS_AS(gpu.evaluate(narrow), gradsync::Error);
  // Still usable after the refusals.
  CHECK(std::isfinite(gpu.forward_backward(data, std::vector<std::int64_t>{0, 1, 2})));
}

TEST_CASE(
    "cuda resnet: SyncBatchNorm's reducer gets the CPU's exchange and normalises with its sums") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  const gradsync::Dataset data = random_dataset(64, 784, 10, 5);
  const gradsync::ResNetShape shape{.blocks_per_stage = 1, .stage_width = 4};
  const std::vector<std::int64_t> batch = batch_from(5, kBatch, data.size);
  // What each model handed its reducer, call by call.
  struct Recorder {
    std::vector<std::vector<float>> calls;
    bool twice = false;  // as two ranks with this rank's batch each: every value doubled
    void operator()(std::span<float> sums) {
      calls.emplace_back(sums.begin(), sums.end());
      if (twice) {
        for (float& v : sums) v *= 2;
      }
    }
  };
  auto reducer = [](Recorder& r) { return [&r](std::span<float> s) { r(s); }; };

  gradsync::CudaResNet plain(shape, kBatch, 0), identity(shape, kBatch, 0),
      doubled(shape, kBatch, 0);
  gradsync::ResNet cpu(shape, kBatch);
  Recorder gpu_calls, gpu_doubled, cpu_doubled;
  gpu_doubled.twice = cpu_doubled.twice = true;
  for (gradsync::Model* m : std::vector<gradsync::Model*>{&plain, &identity, &doubled, &cpu}) {
    m->init_params(3);
  }
  identity.set_batch_stats_reducer(reducer(gpu_calls));
  doubled.set_batch_stats_reducer(reducer(gpu_doubled));
  cpu.set_batch_stats_reducer(reducer(cpu_doubled));

  identity.prepare(data);  // a throwaway step: it reaches no other rank
  CHECK(gpu_calls.calls.empty());

  const double plain_loss = plain.forward_backward(data, batch);
  CHECK(identity.forward_backward(data, batch) == plain_loss);
  doubled.forward_backward(data, batch);
  cpu.forward_backward(data, batch);

  // One rank's SyncBatchNorm is its local batch norm, bit for bit (the exchange's floats are
  // the kernels' own roundings).
  CHECK(host_grads(identity) == host_grads(plain));
  CHECK(to_vector(identity.buffers()) == to_vector(plain.buffers()));

  // Every norm in forward, then every norm in backward, with the CPU's values and counts.
  REQUIRE(gpu_doubled.calls.size() == cpu_doubled.calls.size());
  CHECK(gpu_calls.calls.size() == cpu_doubled.calls.size());
  double exchange = 0;
  for (std::size_t i = 0; i < cpu_doubled.calls.size(); ++i) {
    const std::vector<float>& g = gpu_doubled.calls[i];
    const std::vector<float>& c = cpu_doubled.calls[i];
    REQUIRE(g.size() == c.size());
    CHECK(g.back() == c.back());  // the count, exact
    exchange = std::max(exchange,
                        tensor_relative_difference(std::span<const float>(g).first(g.size() - 1),
                                                   std::span<const float>(c).first(c.size() - 1)));
  }
  const double grads = max_layer_difference(doubled, cpu);
  MESSAGE("sums handed to the reducer, GPU vs CPU: " << exchange << "; gradients " << grads);
  CHECK(exchange <= 1e-3);  // summation order; a ReLU input within rounding of 0 at most
  // The doubled count reaches the running variance (M / (M - 1) of the global batch), as the
  // CPU's; the normalisation itself is the local batch's.
  CHECK(tensor_relative_difference(to_vector(doubled.buffers()), to_vector(cpu.buffers())) <= 1e-5);
  CHECK(to_vector(doubled.buffers()) != to_vector(plain.buffers()));
  CHECK(grads <= 0.1);  // ReLU flips at most, as in the gradient test above
}
