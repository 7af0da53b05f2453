#include "model/optimizer/sgd.h"

#include <algorithm>

#include "common/error.h"
#include "model/kernels/cpu_kernels.h"

namespace gradsync {

Sgd::Sgd(std::size_t size, const SgdOptions& options)
    : options_(options), velocity_(ModelState::kOptimizer, size, 0.f) {}

void Sgd::step(std::span<float> params, std::span<const float> grads) {
  GRADSYNC_CHECK(params.size() == velocity_.size() && grads.size() == velocity_.size(),
                 "optimizer range does not match the buffers it is given");
  // torch.optim.SGD initialises the momentum buffer with the first gradient, not with zero.
  const float momentum = static_cast<float>(options_.momentum);
  sgd_update(params.size(), params.data(), grads.data(), velocity_.data(),
             static_cast<float>(options_.lr_at(steps_)), momentum, static_cast<float>(options_.weight_decay),
             steps_ == 0 ? 0.f : momentum);
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
