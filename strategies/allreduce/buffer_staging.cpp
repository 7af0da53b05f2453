#include "strategies/allreduce/buffer_staging.h"

#include <string>

#include "common/error.h"
#ifdef GRADSYNC_HAVE_CUDA
#include "model/cuda/cuda_device.h"
#include "model/cuda/device_buffer.h"
#endif

namespace gradsync {

#ifdef GRADSYNC_HAVE_CUDA
struct BufferStaging::Device {
  int device = 0;
  cuda::DeviceBuffer<float> buffer;  // grown to the largest span uploaded
};
#else
struct BufferStaging::Device {};
#endif

BufferStaging::BufferStaging() = default;

BufferStaging::BufferStaging(int device) {
  if (device < 0) return;
#ifdef GRADSYNC_HAVE_CUDA
  device_ = std::make_unique<Device>(Device{device, {}});
#else
  throw Error("buffer staging: a model on cuda:" + std::to_string(device) +
              " in a build without CUDA");
#endif
}

BufferStaging::~BufferStaging() = default;
BufferStaging::BufferStaging(BufferStaging&&) noexcept = default;
BufferStaging& BufferStaging::operator=(BufferStaging&&) noexcept = default;

std::span<float> BufferStaging::upload(std::span<float> host) {
  if (!device_ || host.empty()) return host;
#ifdef GRADSYNC_HAVE_CUDA
  cuda::DeviceGuard on(device_->device);
  if (device_->buffer.size() < host.size())
    device_->buffer = cuda::DeviceBuffer<float>(host.size());
  // Synchronous, on the legacy stream: the values are final on the host when this is called
  // (forward_backward has returned, or the model waited for its stream before the reducer),
  // and the communicator's stream reads them only after this returns.
  GRADSYNC_CUDA_CHECK(
      cudaMemcpy(device_->buffer.data(), host.data(), host.size_bytes(), cudaMemcpyHostToDevice));
  return {device_->buffer.data(), host.size()};
#else
  return host;
#endif
}

void BufferStaging::download(std::span<float> host) {
  if (!device_ || host.empty()) return;
#ifdef GRADSYNC_HAVE_CUDA
  cuda::DeviceGuard on(device_->device);
  GRADSYNC_CHECK(host.size() <= device_->buffer.size(),
                 "buffer staging: download of more values than were uploaded");
  GRADSYNC_CUDA_CHECK(
      cudaMemcpy(host.data(), device_->buffer.data(), host.size_bytes(), cudaMemcpyDeviceToHost));
#else
  (void)host;
#endif
}

}  // namespace gradsync
