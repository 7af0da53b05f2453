#include "model/synthetic_model.h"

#include <thread>

#include "common/error.h"
#include "common/random.h"

namespace gradsync {

SyntheticModel::SyntheticModel(std::int64_t parameters, int layers,
                               std::chrono::nanoseconds compute)
    : compute_(compute) {
  GRADSYNC_CHECK(parameters >= 1, "a synthetic model needs at least one parameter");
  GRADSYNC_CHECK(layers >= 1 && layers <= parameters,
                 "a synthetic model needs between 1 and `parameters` layers");
  GRADSYNC_CHECK(compute.count() >= 0, "compute time must not be negative");
  params_.resize(static_cast<std::size_t>(parameters), 0.f);
  grads_.resize(static_cast<std::size_t>(parameters), 0.f);
  const auto n = static_cast<std::size_t>(parameters);
  const auto l = static_cast<std::size_t>(layers);
  for (std::size_t i = 0; i <= l; ++i) layer_begin_.push_back(n * i / l);
}

void SyntheticModel::init_params(std::uint64_t seed) {
  SplitMix64 rng(seed);
  for (float& p : params_) p = static_cast<float>(rng.uniform() - 0.5);
}

float SyntheticModel::sample_target(std::int64_t index) {
  return static_cast<float>(
      SplitMix64(mix_seed(static_cast<std::uint64_t>(index), 0x5EED)).uniform() - 0.5);
}

float SyntheticModel::batch_target(std::span<const std::int64_t> indices) {
  // The mean of the samples' own targets: linear in the samples, so the mean over equal shards
  // of a global batch is the global batch's target (in double, so the order matters little).
  double sum = 0;
  for (std::int64_t i : indices) sum += sample_target(i);
  return static_cast<float>(sum / static_cast<double>(indices.size()));
}

double SyntheticModel::forward_backward(const Dataset& /*data*/,
                                        std::span<const std::int64_t> indices, float grad_scale,
                                        bool accumulate) {
  GRADSYNC_CHECK(!indices.empty(), "a batch needs at least one sample");
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  const auto forward = compute_ / 3;
  const auto per_layer = (compute_ - forward) / static_cast<long>(layer_begin_.size() - 1);
  const float target = batch_target(indices);
  const float scale = grad_scale / static_cast<float>(params_.size());
  double loss = 0;
  // Backward, last layer first: the layer's gradient, then the time its backward would take.
  for (std::size_t layer = layer_begin_.size() - 1; layer-- > 0;) {
    double layer_loss = 0;
    for (std::size_t i = layer_begin_[layer]; i < layer_begin_[layer + 1]; ++i) {
      const float diff = params_[i] - target;
      layer_loss += static_cast<double>(diff) * diff;
      grads_[i] = (accumulate ? grads_[i] : 0.f) + scale * diff;
    }
    loss += layer_loss;
    const auto finished = forward + per_layer * static_cast<long>(layer_begin_.size() - 1 - layer);
    std::this_thread::sleep_until(start + finished);
    if (grad_ready_) grad_ready_(layer_begin_[layer], layer_begin_[layer + 1]);
  }
  return 0.5 * loss / static_cast<double>(params_.size());
}

Evaluation SyntheticModel::evaluate(const Dataset& data) {
  double loss = 0;
  for (float p : params_) loss += static_cast<double>(p) * p;
  return {0.5 * loss / static_cast<double>(params_.size()), 0.0, data.size};
}

}  // namespace gradsync
