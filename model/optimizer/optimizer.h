// Optimizer: the update a strategy applies to the range it owns once gradients are averaged
// (the whole buffer for single / allreduce / dp's replica 0; a key range on a ps shard).
//
//   auto opt = make_sgd(range_size, sgd_options, model.device());   // model/make_optimizer.h
//   opt->step(params, grads);                 // both spans hold size() floats, on the same device
//
// Implementations: Sgd (model/optimizer/sgd.h, host memory) and, in a CUDA build, DeviceSgd
// (model/cuda/, device memory, the same arithmetic). Checkpoints read and restore the state through
// host copies, so a checkpoint written on a GPU resumes on a CPU and the other way round. Not
// thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "model/optimizer/sgd_options.h"

namespace gradsync {

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  virtual void step(std::span<float> params, std::span<const float> grads) = 0;
  virtual std::size_t size() const = 0;
  virtual std::uint64_t steps_taken() const = 0;

  // The state a checkpoint keeps: the momentum buffer (size() floats, copied to or from host
  // memory) and the number of steps taken (torch's first step sets the buffer, later ones blend).
  virtual void save_state(std::span<float> momentum) const = 0;
  virtual void load_state(std::span<const float> momentum, std::uint64_t steps) = 0;
};

}  // namespace gradsync
