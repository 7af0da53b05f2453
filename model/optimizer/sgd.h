// SGD with momentum and weight decay over a flat parameter range, with PyTorch's semantics
// (torch.optim.SGD, dampening 0, not Nesterov):
//   g = grad + weight_decay * p;  v = momentum * v + g  (v = g on the first step);  p -= lr * v
// The momentum buffer is owned here and covers exactly the range given at construction, so a
// parameter-server shard can run one Sgd over its own key range; it is counted as optimizer
// state in the process's model-state ledger (common/model_state_memory.h). Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "common/model_state_memory.h"
#include "model/optimizer/optimizer.h"
#include "model/optimizer/sgd_options.h"

namespace gradsync {

class Sgd final : public Optimizer {
 public:
  Sgd(std::size_t size, const SgdOptions& options);

  // Applies one update; params and grads must have the size given at construction.
  void step(std::span<float> params, std::span<const float> grads) override;
  std::size_t size() const override { return velocity_.size(); }
  std::uint64_t steps_taken() const override { return steps_; }
  void save_state(std::span<float> momentum) const override;
  void load_state(std::span<const float> momentum, std::uint64_t steps) override;

  const SgdOptions& options() const { return options_; }
  std::span<const float> momentum_buffer() const { return velocity_; }

 private:
  SgdOptions options_;
  TrackedBuffer<float> velocity_;
  std::uint64_t steps_ = 0;
};

}  // namespace gradsync
