#include "strategies/single_strategy.h"

#include "common/stopwatch.h"
#include "model/make_optimizer.h"

namespace gradsync {

void SingleStrategy::init(std::span<float> params) {
  sgd_ = make_sgd(params.size(), sgd_options_, device_);
}

void SingleStrategy::synchronize(std::span<float> grads, std::span<float> params) {
  Stopwatch update;
  sgd_->step(params, grads);
  stats_ = StepStats{};
  stats_.compute_s = update.seconds();
}

}  // namespace gradsync
