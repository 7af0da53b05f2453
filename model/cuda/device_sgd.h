// DeviceSgd: model/optimizer/sgd.h's SGD (torch.optim.SGD semantics: momentum buffer set by the
// first step, weight decay added to the gradient, dampening 0, not Nesterov) over a range of floats
// in the memory of one CUDA device, in one fused kernel.
//
//   auto opt = make_sgd(model.param_count(), options, model.device());   // model/make_optimizer.h
//   opt->step(model.params(), model.grads());   // device spans of size() floats
//
// step() reads grads and params as they are when it is called, so the work producing them must
// be finished (every gradsync strategy calls it after a Work::wait or after forward_backward
// returned), and it returns once the update is done, like the host Sgd: the next forward pass
// on any stream sees the new parameters. save_state / load_state copy the momentum buffer to
// or from host memory, so checkpoints move between CPU and GPU runs. Not thread-safe; any
// thread may call it (each call selects the device).
//
// enqueue_update + count_step are step() without its stream and its wait, for a caller that
// orders the update on its own stream: CudaMlp::train_step, which captures it into a CUDA graph.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>

#include "common/model_state_memory.h"
#include "model/cuda/cuda_handles.h"
#include "model/cuda/device_buffer.h"
#include "model/optimizer/optimizer.h"
#include "model/optimizer/sgd_options.h"

namespace gradsync {

class DeviceSgd final : public Optimizer {
 public:
  DeviceSgd(std::size_t size, const SgdOptions& options, int device);
  ~DeviceSgd() override;
  DeviceSgd(const DeviceSgd&) = delete;
  DeviceSgd& operator=(const DeviceSgd&) = delete;

  void step(std::span<float> params, std::span<const float> grads) override;
  std::size_t size() const override { return velocity_.size(); }
  std::uint64_t steps_taken() const override { return steps_; }
  void save_state(std::span<float> momentum) const override;
  void load_state(std::span<const float> momentum, std::uint64_t steps) override;

  int device() const { return device_; }
  const SgdOptions& options() const { return options_; }

  // Enqueues this step's update on `stream`, after the work already there (which produces
  // `grads`), and returns without waiting; count_step() records the step once it is enqueued.
  // The caller waits for `stream` before anything else reads params, grads or the momentum
  // (step, save_state, load_state). The kernel's arguments are the two spans, the momentum
  // buffer (momentum_buffer(), which never moves), options() and whether this is the first
  // step, which sets the momentum buffer to the gradient instead of decaying it: a CUDA graph
  // captured from a call with steps_taken() > 0 therefore replays exactly the update of every
  // later step with the same spans, each replay followed by count_step().
  void enqueue_update(std::span<float> params, std::span<const float> grads, cudaStream_t stream);
  void count_step() { ++steps_; }
  const float* momentum_buffer() const { return velocity_.data(); }

 private:
  SgdOptions options_;
  int device_;
  cuda::DeviceBuffer<float> velocity_;
  TrackedBytes velocity_counted_;  // in the model-state ledger (common/model_state_memory.h)
  cuda::Stream stream_;  // after velocity_, so destroyed first: its work ends before the free
  std::uint64_t steps_ = 0;
};

// What model/make_optimizer.cpp's make_sgd returns for a device >= 0 in a CUDA build. Throws
// gradsync::Error when `device` is not a visible CUDA device.
std::unique_ptr<Optimizer> make_device_sgd(std::size_t size, const SgdOptions& options, int device);

}  // namespace gradsync
