// SGD with momentum and weight decay over a flat parameter range, with PyTorch's semantics
// (torch.optim.SGD, dampening 0, not Nesterov):
//   g = grad + weight_decay * p;  v = momentum * v + g  (v = g on the first step);  p -= lr * v
// The momentum buffer is owned here and covers exactly the range given at construction, so a
// parameter-server shard can run one Sgd over its own key range. Not thread-safe.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace gradsync {

struct SgdOptions {
  double lr = 0.05;
  double momentum = 0.9;
  double weight_decay = 0.0;
};

class Sgd {
 public:
  Sgd(std::size_t size, const SgdOptions& options);

  // Applies one update; params and grads must have the size given at construction.
  void step(std::span<float> params, std::span<const float> grads);

  const SgdOptions& options() const { return options_; }
  std::span<const float> momentum_buffer() const { return velocity_; }
  std::size_t steps_taken() const { return steps_; }

 private:
  SgdOptions options_;
  std::vector<float> velocity_;
  std::size_t steps_ = 0;
};

}  // namespace gradsync
