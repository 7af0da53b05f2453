#include "strategies/buffer_staging.h"

#include <string>

#include "common/error.h"
#ifdef GRADSYNC_HAVE_CUDA
#include "model/cuda/cuda_check.h"
#include "model/cuda/cuda_device.h"
#include "model/cuda/device_buffer.h"
#endif

namespace gradsync {

BufferStaging::BufferStaging() = default;
BufferStaging::~BufferStaging() = default;
BufferStaging::BufferStaging(BufferStaging&&) noexcept = default;
BufferStaging& BufferStaging::operator=(BufferStaging&&) noexcept = default;

#ifdef GRADSYNC_HAVE_CUDA

struct BufferStaging::Device {
  int device = 0;
  cuda::DeviceBuffer<float> buffer;  // grown to the largest span uploaded
};

BufferStaging::BufferStaging(int device) {
  if (device >= 0) device_ = std::make_unique<Device>(Device{device, {}});
}

std::span<float> BufferStaging::upload(std::span<float> host) {
  if (!device_ || host.empty()) return host;
  cuda::DeviceGuard on(device_->device);
  if (device_->buffer.size() < host.size())
    device_->buffer = cuda::DeviceBuffer<float>(host.size());
  // Async on the legacy stream, then waited for: from pageable memory a plain cudaMemcpy may
  // return before its DMA lands, and the communicator's non-blocking stream would not wait.
  GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(device_->buffer.data(), host.data(), host.size_bytes(),
                                      cudaMemcpyHostToDevice, cudaStreamLegacy));
  GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
  return {device_->buffer.data(), host.size()};
}

void BufferStaging::download(std::span<float> host) {
  if (!device_ || host.empty()) return;
  cuda::DeviceGuard on(device_->device);
  GRADSYNC_CHECK(host.size() <= device_->buffer.size(),
                 "buffer staging: download of more values than were uploaded");
  GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(host.data(), device_->buffer.data(), host.size_bytes(),
                                      cudaMemcpyDeviceToHost, cudaStreamLegacy));
  GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
}

#else  // a build without CUDA has no GPU models: only host memory

struct BufferStaging::Device {};

BufferStaging::BufferStaging(int device) {
  if (device >= 0) {
    throw Error("buffer staging: a model on cuda:" + std::to_string(device) +
                " in a build without CUDA");
  }
}

std::span<float> BufferStaging::upload(std::span<float> host) { return host; }
void BufferStaging::download(std::span<float> /*host*/) {}

#endif

}  // namespace gradsync
