// SyntheticModel: a stand-in for a large network (ResNet-50's 25.6M parameters, BERT's 110M)
// with its gradient volume but not its compute, so that strategies can be compared at that
// size on any machine. It has real parameter and gradient buffers of `parameters` floats,
// split into `layers` equal layers, and forward_backward() takes `compute` of wall time,
// sleeping through it as a host thread does while an accelerator computes: the CPU stays free
// for communication, as on a GPU node. A third of the time is forward; backward then finishes
// one layer every (2/3 compute)/layers, last layer first, and reports it to the gradient-ready
// callback, so bucketed all-reduce can overlap it exactly as with a real network.
//
// The gradient is real arithmetic, and is the same on every replica for the same batch: the
// loss of a batch is 0.5 * mean((p - t_b)^2) with t_b the mean of its samples' targets (each a
// function of the sample's index), so its gradient is (p - t_b) / parameters per element. That
// is linear in the samples: averaging over replicas' equal shards gives the gradient of the
// global batch, and SGD drives p towards the mean target: training makes sense and the
// synchronous strategies still follow `single` on the global batch (a test holds it).
// Writing the gradient is one pass over the buffers, done inside the compute time (when the
// compute time is shorter than that pass, the pass sets the pace).
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "common/model_state_memory.h"
#include "model/model.h"

namespace gradsync {

class SyntheticModel final : public Model {
 public:
  SyntheticModel(std::int64_t parameters, int layers, std::chrono::nanoseconds compute);

  void init_params(std::uint64_t seed) override;
  std::span<float> params() override { return params_; }
  std::span<float> grads() override { return grads_; }
  std::size_t param_count() const override { return params_.size(); }

  double forward_backward(const Dataset& data, std::span<const std::int64_t> indices,
                          float grad_scale = 1.0f, bool accumulate = false) override;
  void set_grad_ready_callback(GradReadyCallback callback) override {
    grad_ready_ = std::move(callback);
  }

  bool evaluates() const override { return false; }
  // The loss against target 0; accuracy 0 (there are no classes).
  Evaluation evaluate(const Dataset& data) override;

  // A sample's target, in [-0.5, 0.5), a function of its index alone; a batch's target is the
  // mean of its samples' targets.
  static float sample_target(std::int64_t index);
  static float batch_target(std::span<const std::int64_t> indices);

 private:
  // Counted in the process's model-state ledger (common/model_state_memory.h).
  TrackedBuffer<float> params_{ModelState::kParams};
  TrackedBuffer<float> grads_{ModelState::kGrads};
  std::vector<std::size_t> layer_begin_;  // layers + 1 offsets
  std::chrono::nanoseconds compute_;
  GradReadyCallback grad_ready_;
};

}  // namespace gradsync
