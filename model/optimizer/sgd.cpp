#include "model/optimizer/sgd.h"

#include <algorithm>

#include "common/error.h"

namespace gradsync {

Sgd::Sgd(std::size_t size, const SgdOptions& options) : options_(options), velocity_(size, 0.f) {}

void Sgd::step(std::span<float> params, std::span<const float> grads) {
  GRADSYNC_CHECK(params.size() == velocity_.size() && grads.size() == velocity_.size(),
                 "optimizer range does not match the buffers it is given");
  const float lr = static_cast<float>(options_.lr);
  const float mu = static_cast<float>(options_.momentum);
  const float wd = static_cast<float>(options_.weight_decay);
  const std::size_t n = params.size();
  float* p = params.data();
  const float* g = grads.data();
  float* v = velocity_.data();
  // torch.optim.SGD initialises the momentum buffer with the first gradient, not with zero.
  const float keep = steps_ == 0 ? 0.f : mu;
  for (std::size_t i = 0; i < n; ++i) {
    const float d = g[i] + wd * p[i];
    v[i] = keep * v[i] + d;
    p[i] -= lr * (mu == 0.f ? d : v[i]);
  }
  ++steps_;
}

void Sgd::save_state(std::span<float> momentum) const {
  GRADSYNC_CHECK(momentum.size() == velocity_.size(), "save_state: size != optimizer range");
  std::copy(velocity_.begin(), velocity_.end(), momentum.begin());
}

void Sgd::load_state(std::span<const float> momentum, std::uint64_t steps) {
  GRADSYNC_CHECK(momentum.size() == velocity_.size(), "load_state: size != optimizer range");
  std::copy(momentum.begin(), momentum.end(), velocity_.begin());
  steps_ = steps;
}

}  // namespace gradsync
