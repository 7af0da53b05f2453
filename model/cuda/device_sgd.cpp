#include "model/cuda/device_sgd.h"

#include "common/error.h"
#include "model/cuda/cuda_check.h"
#include "model/cuda/cuda_device.h"
#include "model/cuda/mlp_kernels.h"

namespace gradsync {

DeviceSgd::DeviceSgd(std::size_t size, const SgdOptions& options, int device)
    : options_(options), device_(device) {
  cuda::require_device(device_, "SGD");
  cuda::DeviceGuard on(device_);
  stream_ = cuda::make_stream();
  velocity_ = cuda::DeviceBuffer<float>(size);
  velocity_counted_ = TrackedBytes(ModelState::kOptimizer, velocity_.bytes());
  velocity_.zero(stream_.get());
  GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
}

DeviceSgd::~DeviceSgd() = default;  // the stream waits for its work before it goes

void DeviceSgd::step(std::span<float> params, std::span<const float> grads) {
  cuda::DeviceGuard on(device_);
  enqueue_update(params, grads, stream_.get());
  GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  count_step();
}

void DeviceSgd::enqueue_update(std::span<float> params, std::span<const float> grads,
                               cudaStream_t stream) {
  GRADSYNC_CHECK(params.size() == velocity_.size() && grads.size() == velocity_.size(),
                 "optimizer range does not match the buffers it is given");
  cuda::DeviceGuard on(device_);
  // torch.optim.SGD initialises the momentum buffer with the first gradient, not with zero.
  const float mu = static_cast<float>(options_.momentum);
  const float keep = steps_ == 0 ? 0.f : mu;
  GRADSYNC_CUDA_CHECK(kernels::sgd_update(params.data(), grads.data(), velocity_.data(),
                                          params.size(), static_cast<float>(options_.lr_at(steps_)), mu,
                                          static_cast<float>(options_.weight_decay), keep, stream));
}

void DeviceSgd::save_state(std::span<float> momentum) const {
  GRADSYNC_CHECK(momentum.size() == velocity_.size(), "save_state: size != optimizer range");
  cuda::DeviceGuard on(device_);
  GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  GRADSYNC_CUDA_CHECK(
      cudaMemcpy(momentum.data(), velocity_.data(), velocity_.bytes(), cudaMemcpyDeviceToHost));
}

void DeviceSgd::load_state(std::span<const float> momentum, std::uint64_t steps) {
  GRADSYNC_CHECK(momentum.size() == velocity_.size(), "load_state: size != optimizer range");
  cuda::DeviceGuard on(device_);
  // On the optimizer's stream, then waited for: a plain cudaMemcpy from pageable memory may
  // return before its DMA lands, and the next step's kernels would not wait for it.
  GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(velocity_.data(), momentum.data(), velocity_.bytes(),
                                      cudaMemcpyHostToDevice, stream_.get()));
  GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  steps_ = steps;
}

std::unique_ptr<Optimizer> make_device_sgd(std::size_t size, const SgdOptions& options,
                                           int device) {
  return std::make_unique<DeviceSgd>(size, options, device);
}

}  // namespace gradsync
